// Runs several pulsar-admin commands in one JVM (start-up dominates a command's time).
//
// Usage: PulsarAdminBatch CLIENT_CONF COMMAND_FILE
// COMMAND_FILE holds one command per line, its arguments separated by tabs. For each
// command the output is framed by "=== begin N" and "=== exit N CODE" lines, CODE being
// the exit code pulsar-admin would have ended with; its error output is included.
//
// It lives in pulsar-admin's package to reach the switch that keeps the tool from
// exiting the JVM after a command.
package org.apache.pulsar.admin.cli;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

public final class PulsarAdminBatch {
    private PulsarAdminBatch() {}

    public static void main(String[] args) throws Exception {
        String conf = args[0];
        List<String> lines = Files.readAllLines(Path.of(args[1]), StandardCharsets.UTF_8);
        PulsarAdminTool.setAllowSystemExit(false);
        System.setErr(System.out); // one stream, so each command's messages stay with it
        int index = 0;
        for (String line : lines) {
            if (line.isBlank()) {
                continue;
            }
            List<String> argv = new ArrayList<>();
            argv.add(conf);
            argv.addAll(List.of(line.split("\t")));
            System.out.println("=== begin " + index);
            System.out.flush();
            int code;
            try {
                PulsarAdminTool.execute(argv.toArray(new String[0]));
                code = PulsarAdminTool.getLastExitCode();
            } catch (Throwable error) {
                error.printStackTrace(System.out);
                code = 255;
            }
            System.out.flush();
            System.err.flush();
            System.out.println("=== exit " + index + " " + code);
            System.out.flush();
            index++;
        }
        System.exit(0);
    }
}
