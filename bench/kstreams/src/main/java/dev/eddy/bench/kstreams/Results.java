package dev.eddy.bench.kstreams;

import java.util.Locale;
import java.util.Map;
import java.util.StringJoiner;

/** The one JSON line each program prints on stdout, and the exit path shared by both. */
final class Results {
    private Results() {
    }

    /** Writes {@code fields} (numbers only, in the given order) as one JSON object line on stdout. */
    static void print(Map<String, Number> fields) {
        StringJoiner json = new StringJoiner(",", "{", "}");
        for (Map.Entry<String, Number> field : fields.entrySet()) {
            Number value = field.getValue();
            String text = (value instanceof Double || value instanceof Float)
                ? String.format(Locale.ROOT, "%.3f", value.doubleValue())
                : value.toString();
            json.add("\"" + field.getKey() + "\":" + text);
        }
        System.out.println(json);
        System.out.flush();
    }

    /** Reports a failure on stderr; stdout stays empty so a caller never parses a half result. */
    static void fail(String program, String reason) {
        System.err.println(program + ": " + reason);
        System.err.flush();
    }
}
