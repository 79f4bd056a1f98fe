package dev.eddy.bench.kstreams;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;

/**
 * The state directory of one benchmark run: the caller's {@code --state-dir}, or a temporary
 * one that is deleted afterwards. Either way the programs call {@code KafkaStreams#cleanUp}
 * first, so no store or checkpoint of an earlier run is reused.
 */
final class StateDirs {
    private final Path path;
    private final boolean temporary;

    private StateDirs(Path path, boolean temporary) {
        this.path = path;
        this.temporary = temporary;
    }

    static StateDirs of(String given, String tempPrefix) throws IOException {
        return given != null
            ? new StateDirs(Path.of(given), false)
            : new StateDirs(Files.createTempDirectory(tempPrefix), true);
    }

    Path path() {
        return path;
    }

    /** Deletes a temporary directory; the caller's own directory is left for inspection. */
    void release() throws IOException {
        if (!temporary) {
            return;
        }
        try (Stream<Path> paths = Files.walk(path)) {
            for (Path p : (Iterable<Path>) paths.sorted(Comparator.reverseOrder())::iterator) {
                Files.deleteIfExists(p);
            }
        }
    }
}
