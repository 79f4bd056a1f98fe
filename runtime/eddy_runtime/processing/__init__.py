"""What runs inside one task over its records: stateful steps, aggregations, joins, sessions,
suppression, sinks and bad records."""
