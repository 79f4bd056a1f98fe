"""An enrichment with a KTable-KTable join: customers (id -> name) joined with their addresses
(id -> city), kept up to date as either side changes.

Both topics are tables (compacted, keyed by customer id, the same partition count); the join is
a left join, so a customer without an address yet is written with a null city, and a deleted
customer (a tombstone) deletes its enriched record. Each side lives in its own RocksDB store
with a changelog, so a restart or a failover restores the join's state instead of re-reading both
topics.
"""

from __future__ import annotations

import json

from eddy_runtime.dsl.pipeline import Topology


def enrich(name: str | None, city: str | None) -> str:
    return json.dumps({"name": name, "city": city})


def build(topology: Topology, customers_topic: str = "customers", addresses_topic: str = "addresses",
          output_topic: str = "customers-enriched") -> None:
    customers = topology.table(customers_topic, name="customers")
    addresses = topology.table(addresses_topic, name="addresses")
    customers.join(addresses, enrich, how="left").to(output_topic)  # JSON text, written as a string
