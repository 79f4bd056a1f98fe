"""The Spark driver of a stream app: its loop (loop.py), startup, the assignment source, the
generation hand-off to the runners, batch and Spark plans, offsets, poison isolation, the batch
accounting, volumes and progress, metrics. Never imports the executor."""
