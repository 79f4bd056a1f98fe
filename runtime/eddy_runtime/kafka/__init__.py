"""Kafka at the edges: client settings, topics, input ranges, the record codec and range reader,
the record collector and the transactional producer."""
