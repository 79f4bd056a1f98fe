"""The fault campaign's app (bench/chaos.py, e2e/test_chaos.py): a join, a repartition hop and
windows, exactly-once, with an input whose every record is known in advance.

- ``events`` is keyed by user; each value is JSON ``{"seq", "user", "amount"}``, timestamped by
  the producer from its sequence number. ``users`` is a compacted table, keyed by user, whose
  value is the user's region; it is written before the first event.
- Sub-topology 0 joins each event with its user's region (a stream-table join: the ``users``
  store) and writes ``{"value": <the event>, "table_value": <the region>}`` to ``enriched``:
  exactly one record per event, keyed by user.
- The joined events are re-keyed by region (the ``table_value`` column) through
  ``<app>-by-region-repartition`` and counted per region and tumbling window
  (``region-windows`` store), each changed count written to ``windows`` keyed by the region
  followed by the window's start (8 bytes, big-endian).

The grace is longer than any campaign, so no record is ever late: every count is a pure function
of the input (`bench/chaos_verify.py` computes them again).
"""

from __future__ import annotations

from eddy_runtime.dsl.pipeline import Topology, tumbling


def build(topology: Topology, events_topic: str = "events", users_topic: str = "users",
          enriched_topic: str = "enriched", windows_topic: str = "windows", window: str = "10s",
          grace: str = "24h") -> None:
    events = topology.stream(events_topic, value_serde="json")
    users = topology.table(users_topic, name="users")
    enriched = events.join(users)
    enriched.to(enriched_topic, value=["value", "table_value"], value_serde="json")
    by_region = enriched.group_by("table_value", name="by-region")
    by_region.windowed_by(tumbling(window, grace=grace)).count(name="region-windows").to(windows_topic)
