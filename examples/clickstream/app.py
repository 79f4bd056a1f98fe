"""Page views sessionized per user: a session-windowed count.

The topic is keyed by user id. A user's views less than `gap` apart (30 minutes here) make one
session, and a view that falls between two sessions merges them, as Kafka Streams'
``SessionWindows`` do; views arriving up to `grace` after stream time passed their session's end
still count, later ones are dropped. Each update writes the session's view count, keyed by the
user followed by the session's end and start (8 bytes each, Kafka Streams'
``SessionWindowedSerializer``); a session merged into a newer one is written as a tombstone, so a
compacted output topic keeps exactly the live sessions. The sessions live in a RocksDB session
store with a changelog, so a restart or a failover does not forget an open session.

`build_final` writes each session once, when it is over: its final count, once stream time has
passed its last view by the gap plus the grace (Kafka Streams' ``suppress(untilWindowCloses)``),
with neither intermediate counts nor tombstones of merged sessions.
"""

from __future__ import annotations

from eddy_runtime.dsl.pipeline import Topology, session_windows, until_window_closes


def build(topology: Topology, views_topic: str = "page-views", output_topic: str = "user-sessions",
          gap: str = "30m", grace: str = "5m") -> None:
    views = topology.stream(views_topic, value_serde="json")
    views.group_by_key().windowed_by(session_windows(gap, grace)).count(name="sessions").to(output_topic)


def build_final(topology: Topology, views_topic: str = "page-views", output_topic: str = "user-sessions-final",
                gap: str = "30m", grace: str = "5m") -> None:
    views = topology.stream(views_topic, value_serde="json")
    sessions = views.group_by_key().windowed_by(session_windows(gap, grace)).count(name="sessions")
    sessions.suppress(until_window_closes()).to(output_topic)
