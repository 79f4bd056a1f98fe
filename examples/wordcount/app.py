"""The word-count example: lines of text in, a running count per word out.

Sub-topology 0 splits each line into words in a DataFrame step and re-keys by word through the
``<app>-words-repartition`` topic; sub-topology 1 counts per word in the ``counts`` store (a
RocksDB store with its changelog) and writes each changed count to the output topic.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from eddy_runtime.pipeline import Topology


def split_words(df):  # DataFrame -> DataFrame, no shuffle: runs on the task's executor
    words = F.explode(F.split(F.lower(F.col("value")), r"[^\p{L}\p{N}']+"))
    return df.select(words.alias("word"), "timestamp").where(F.col("word") != "")


def build(topology: Topology, input_topic: str = "wordcount-input", output_topic: str = "wordcount-output") -> None:
    lines = topology.stream(input_topic, value_serde="string")
    words = lines.transform(split_words)
    words.group_by("word", name="words").count(name="counts").to(output_topic)
