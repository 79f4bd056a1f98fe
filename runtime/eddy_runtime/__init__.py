"""Eddy's runtime: what runs in the Spark driver and executors (pipeline, state stores, commit)."""
