"""The enrichment example (examples/enrichment): its StreamApp manifest run by the driver on real
Kafka and Spark executors. Customers and addresses change in any order; the enriched output's
last record per customer is the left join of both tables' last values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[2] / "examples" / "enrichment" / "streamapp.yaml"


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_the_enrichment_example_joins_customers_with_their_addresses(kafka, spark, tmp_path, execution):
    body = yaml.safe_load(MANIFEST.read_text())
    app = kafka.unique_name(f"enrich-{execution.lower()}")
    args = {name: f"{app}-{name}" for name in ("customers", "addresses", "enriched")}
    customers = kafka.create_topic(args["customers"], partitions=2, config={"cleanup.policy": "compact"})
    addresses = kafka.create_topic(args["addresses"], partitions=2, config={"cleanup.policy": "compact"})
    body["metadata"]["name"] = app
    body["spec"]["kafka"]["bootstrapServers"] = kafka.bootstrap
    body["spec"]["pipeline"]["args"] = {"customers_topic": customers, "addresses_topic": addresses,
                                        "output_topic": args["enriched"]}
    body["spec"]["execution"] = execution
    spec = StreamAppSpec.from_manifest(body)

    produce(kafka.bootstrap, customers, [(b"c1", b"Ada"), (b"c2", b"Grace"), (b"c3", b"Linus")],
            timestamps=[1_000, 1_000, 1_000])
    produce(kafka.bootstrap, addresses, [(b"c1", b"London"), (b"c3", b"Helsinki"), (b"c9", b"Nowhere")],
            timestamps=[2_000, 2_000, 2_000])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    # later changes: c1 moves, c3 is deleted, c2 gets an address
    produce(kafka.bootstrap, addresses, [(b"c1", b"Paris"), (b"c2", b"Arlington")], timestamps=[3_000, 3_000])
    produce(kafka.bootstrap, customers, [(b"c3", None)], timestamps=[3_000])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))

    last = {}
    for m in read_all(kafka.bootstrap, args["enriched"]):
        last[m.key().decode()] = None if m.value() is None else json.loads(m.value())
    assert last == {"c1": {"name": "Ada", "city": "Paris"}, "c2": {"name": "Grace", "city": "Arlington"},
                    "c3": None}  # c3's tombstone; c9 has no customer: a left join writes nothing for it
