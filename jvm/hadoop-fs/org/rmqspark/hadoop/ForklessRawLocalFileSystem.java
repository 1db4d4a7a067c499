package org.rmqspark.hadoop;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.FSLinkResolver;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system with the two calls that fork a process done in Java instead.
 *
 * <p>Without Hadoop's native library (pyspark ships none), {@link RawLocalFileSystem} runs
 * {@code chmod} for every file it creates and {@code readlink} for every
 * {@code getFileLinkStatus}, which {@code FileContext.rename} calls for both of its paths.
 * Every Delta commit (its log entry and checksum) and every streaming checkpoint file goes
 * through them: four to six forks of the driver JVM per file, milliseconds each. These
 * overrides give the same answers through {@code java.nio.file}; everything else, the
 * no-overwrite rename Delta's log relies on included, is Hadoop's own code.
 */
public class ForklessRawLocalFileSystem extends RawLocalFileSystem {

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    File file = pathToFile(path);
    if (!file.exists()) {
      throw new FileNotFoundException("File " + path + " does not exist");
    }
    if (permission.getStickyBit()) { // java.nio cannot set it; Delta and Spark never ask
      super.setPermission(path, permission);
      return;
    }
    Files.setPosixFilePermissions(file.toPath(),
        PosixFilePermissions.fromString(permission.toString()));
  }

  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    FileStatus status = linkStatus(path);
    if (status.isSymlink()) {
      status.setSymlink(FSLinkResolver.qualifySymlinkTarget(getUri(), status.getPath(),
          status.getSymlink()));
    }
    return status;
  }

  @Override
  public Path getLinkTarget(Path path) throws IOException {
    return linkStatus(path).getSymlink(); // unqualified; throws when not a link, as Hadoop's
  }

  /**
   * Hadoop's own answer (its {@code deprecatedGetFileLinkStatusInternal}) without the
   * {@code readlink}. Hadoop asks about {@code new File(path.toString())}, which for a
   * qualified path ({@code file:/...}, as {@code FileContext} always passes) names no file,
   * so a link is reported as the file it points to; the same file is asked about here, so
   * the answers are the same.
   */
  private FileStatus linkStatus(Path path) throws IOException {
    String target = symlinkTarget(new File(path.toString()));
    FileStatus status;
    try {
      status = getFileStatus(path);
    } catch (FileNotFoundException missing) {
      if (target.isEmpty()) {
        throw missing;
      }
      return new FileStatus(0, false, 0, 0, 0, 0, FsPermission.getDefault(), "", "",
          new Path(target), path); // a dangling link
    }
    if (target.isEmpty()) {
      return status;
    }
    return new FileStatus(status.getLen(), false, status.getReplication(),
        status.getBlockSize(), status.getModificationTime(), status.getAccessTime(),
        status.getPermission(), status.getOwner(), status.getGroup(), new Path(target), path);
  }

  /** What {@code readlink FILE} prints: the link's target, or nothing. */
  private static String symlinkTarget(File file) throws IOException {
    java.nio.file.Path link = file.toPath();
    if (!Files.isSymbolicLink(link)) {
      return "";
    }
    try {
      return Files.readSymbolicLink(link).toString();
    } catch (NoSuchFileException gone) {
      return "";
    }
  }
}
