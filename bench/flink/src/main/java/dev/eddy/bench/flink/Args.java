package dev.eddy.bench.flink;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * Command-line options: {@code --name value} pairs, plus any number of {@code --config key=value}
 * handed to Flink's configuration as they are (a run may change a setting without a rebuild).
 */
final class Args {
    private final Map<String, String> options = new HashMap<>();
    private final Map<String, String> configs = new LinkedHashMap<>();

    private Args() {}

    /** Parses {@code argv}; rejects names outside {@code known}, so that a typo is not ignored. */
    static Args parse(String[] argv, Set<String> known) {
        Args parsed = new Args();
        for (int i = 0; i < argv.length; i += 2) {
            String name = argv[i];
            if (!name.startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value, got '" + name + "'");
            }
            String key = name.substring(2);
            String value = argv[i + 1];
            if (key.equals("config")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--config wants key=value, got '" + value + "'");
                }
                parsed.configs.put(value.substring(0, eq), value.substring(eq + 1));
            } else if (known.contains(key)) {
                parsed.options.put(key, value);
            } else {
                throw new IllegalArgumentException("unknown option --" + key + " (known: " + known + ", config)");
            }
        }
        return parsed;
    }

    String required(String name) {
        String value = options.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return value;
    }

    String optional(String name, String fallback) {
        return options.getOrDefault(name, fallback);
    }

    Map<String, String> configs() {
        return configs;
    }
}
