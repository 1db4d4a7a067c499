package org.rmqspark.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * {@code fs.file.impl}: Hadoop's checksummed {@code LocalFileSystem} (the {@code FileSystem}
 * API that Spark's and Delta's readers and writers use) over
 * {@link ForklessRawLocalFileSystem}.
 */
public class ForklessLocalFileSystem extends LocalFileSystem {

  public ForklessLocalFileSystem() {
    super(new ForklessRawLocalFileSystem());
  }
}
