"""The Spark driver of a stream app: its loop, startup, batch and Spark plans, offsets, poison
isolation, volumes and progress, health and metrics. Never imports the executor."""
