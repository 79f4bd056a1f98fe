"""The task runner process, one per executor: it holds the tasks, processes them (continuous
path and micro-batch items) and commits. Never imports the driver."""
