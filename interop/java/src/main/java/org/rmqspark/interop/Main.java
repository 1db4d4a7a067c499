package org.rmqspark.interop;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Entry point of the rmq-spark interop harness.
 *
 * <p>Subcommands (JSON lines on stdout; logs and stray prints on stderr):
 * <ul>
 *   <li>{@code encode}: one JSON request per stdin line, one JSON answer per line
 *       (see {@link EncodeCommand}).</li>
 *   <li>{@code write-store DIR N [SEGMENT_BYTES]}: a real DefaultMessageStore writes N
 *       varied messages (see {@link WriteStoreCommand}).</li>
 *   <li>{@code read-store DIR}: a real DefaultMessageStore loads, recovers and reads an
 *       existing store (see {@link ReadStoreCommand}).</li>
 *   <li>{@code version}: the RocketMQ version on the classpath, as {@code {"rocketmq": "V5_3_3"}}.</li>
 * </ul>
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        // Keep stdout for our JSON only: anything else that prints goes to stderr.
        PrintStream out = new PrintStream(
            new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        int rc;
        try {
            rc = run(args, out);
        } catch (Throwable e) {
            // Exit even so: RocketMQ's non-daemon threads would keep the JVM alive.
            e.printStackTrace();
            rc = 1;
        } finally {
            out.flush();
        }
        // RocketMQ leaves non-daemon threads behind; exit explicitly.
        System.exit(rc);
    }

    static int run(String[] args, PrintStream out) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: encode | write-store DIR N [SEGMENT_BYTES] | read-store DIR | version");
            return 2;
        }
        String[] rest = Arrays.copyOfRange(args, 1, args.length);
        switch (args[0]) {
            case "encode":
                return EncodeCommand.run(rest, out);
            case "write-store":
                return WriteStoreCommand.run(rest, out);
            case "read-store":
                return ReadStoreCommand.run(rest, out);
            case "version":
                out.println("{\"rocketmq\":\"" + org.apache.rocketmq.common.MQVersion.getVersionDesc(
                    org.apache.rocketmq.common.MQVersion.CURRENT_VERSION) + "\"}");
                return 0;
            default:
                System.err.println("unknown command: " + args[0]);
                return 2;
        }
    }
}
