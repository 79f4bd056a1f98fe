package dev.eddy.bench.kstreams;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

/**
 * Command-line options of the benchmark programs: {@code --name value} pairs,
 * plus any number of {@code --config key=value} that are passed to Kafka
 * Streams as they are, so that a benchmark can change a setting without a
 * rebuild.
 */
final class BenchArgs {
    private final Map<String, String> options = new HashMap<>();
    private final Map<String, String> configs = new LinkedHashMap<>();

    private BenchArgs() {
    }

    /** Parses {@code args}; rejects names outside {@code known} so a typo is not silently ignored. */
    static BenchArgs parse(String[] args, Set<String> known) {
        BenchArgs parsed = new BenchArgs();
        for (int i = 0; i < args.length; i++) {
            String name = args[i];
            if (!name.startsWith("--") || i + 1 >= args.length) {
                throw parsed.usage("expected --name value, got '" + name + "'");
            }
            String value = args[++i];
            String key = name.substring(2);
            if (key.equals("config")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw parsed.usage("--config wants key=value, got '" + value + "'");
                }
                parsed.configs.put(value.substring(0, eq), value.substring(eq + 1));
            } else if (known.contains(key)) {
                parsed.options.put(key, value);
            } else {
                throw parsed.usage("unknown option --" + key + " (known: " + known + ", config)");
            }
        }
        return parsed;
    }

    String required(String name) {
        String value = options.get(name);
        if (value == null) {
            throw usage("missing --" + name);
        }
        return value;
    }

    String optional(String name, String fallback) {
        return options.getOrDefault(name, fallback);
    }

    long longOption(String name, long fallback) {
        String value = options.get(name);
        if (value == null) {
            return fallback;
        }
        try {
            return Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw usage("--" + name + " wants a number, got '" + value + "'");
        }
    }

    /** Applies the {@code --config} pairs last, so they win over the program's own defaults. */
    void applyConfigs(Properties props) {
        props.putAll(configs);
    }

    IllegalArgumentException usage(String reason) {
        return new IllegalArgumentException(reason);
    }
}
