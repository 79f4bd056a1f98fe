"""The orders example (examples/orders): its StreamApp manifest run by the driver on real Kafka
and Spark executors. Payments come before or after their orders, within the window or not."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from eddy_contract.spec import StreamAppSpec
from tests.runtime.apps import driver_for, produce, read_all, run_until_idle

pytestmark = pytest.mark.integration

MANIFEST = Path(__file__).parents[2] / "examples" / "orders" / "streamapp.yaml"
MINUTE = 60_000


def orders_app(kafka, name: str, partitions: int = 2, args: dict | None = None,
               **spec: object) -> tuple[StreamAppSpec, str, str, str]:
    """The example's manifest on this broker with topics of its own: (spec, orders, payments, output)."""
    body = yaml.safe_load(MANIFEST.read_text())
    app = kafka.unique_name(name)
    orders = kafka.create_topic(f"{app}-orders", partitions=partitions)
    payments = kafka.create_topic(f"{app}-payments", partitions=partitions)
    out = f"{app}-paid"
    body["metadata"]["name"] = app
    body["spec"]["kafka"]["bootstrapServers"] = kafka.bootstrap
    body["spec"]["pipeline"]["args"].update(orders_topic=orders, payments_topic=payments, output_topic=out,
                                            **(args or {}))
    body["spec"].update(spec)
    return StreamAppSpec.from_manifest(body), orders, payments, out


@pytest.mark.parametrize("execution", ["continuous", "microBatch"])
def test_the_orders_example_matches_payments_within_the_window(kafka, spark, tmp_path, execution):
    spec, orders, payments, out = orders_app(kafka, f"orders-{execution.lower()}", execution=execution)
    t0 = int(time.time() * 1000) - 3_600_000  # recent: the broker deletes records past its retention

    def order(n):
        return json.dumps({"id": n, "total": 10 * n}).encode()

    def payment(n):
        return json.dumps({"id": n, "paid": 10 * n}).encode()

    produce(kafka.bootstrap, orders, [(b"o1", order(1)), (b"o2", order(2)), (b"o3", order(3))],
            timestamps=[t0, t0, t0])
    # o1 paid 5 minutes later, o2 paid 30 minutes later (too far apart), o4 paid before its order
    produce(kafka.bootstrap, payments, [(b"o1", payment(1)), (b"o2", payment(2)), (b"o4", payment(4))],
            timestamps=[t0 + 5 * MINUTE, t0 + 30 * MINUTE, t0 + 30 * MINUTE])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    # o4's order comes 2 minutes after its payment: it joins the stored payment (after a restart)
    produce(kafka.bootstrap, orders, [(b"o4", order(4))], timestamps=[t0 + 32 * MINUTE])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))

    matched = {m.key().decode(): (json.loads(m.value()), m.timestamp()[1]) for m in read_all(kafka.bootstrap, out)}
    assert matched == {
        "o1": ({"order": {"id": 1, "total": 10}, "payment": {"id": 1, "paid": 10}}, t0 + 5 * MINUTE),
        "o4": ({"order": {"id": 4, "total": 40}, "payment": {"id": 4, "paid": 40}}, t0 + 32 * MINUTE),
    }


def test_with_how_left_an_unpaid_order_is_written_once_its_window_closed(kafka, spark, tmp_path):
    spec, orders, payments, out = orders_app(kafka, "orders-left", args={"how": "left"})
    t0 = int(time.time() * 1000) - 3_600_000
    produce(kafka.bootstrap, orders, [(f"o{n}".encode(), json.dumps({"id": n}).encode()) for n in (1, 2, 3)],
            timestamps=[t0, t0, t0 + 20 * MINUTE])
    produce(kafka.bootstrap, payments, [(b"o1", json.dumps({"paid": 1}).encode())], timestamps=[t0 + 5 * MINUTE])
    driver = driver_for(spark, spec, str(tmp_path / "state"))
    run_until_idle(driver)
    # Stream time is a task's own. o3's payment comes 20 minutes after it (outside the window):
    # it moves stream time in o3's task past o3's window (its end, +1 minute of grace), and o3
    # is written unpaid, having waited in the outer store across the restart. o2 (its window
    # closed by o3 if they share a task, else by that payment) is written unpaid too.
    produce(kafka.bootstrap, payments, [(b"o3", json.dumps({"paid": 3}).encode())], timestamps=[t0 + 40 * MINUTE])
    run_until_idle(driver_for(spark, spec, str(tmp_path / "state")))
    written = [(m.key().decode(), json.loads(m.value()), m.timestamp()[1]) for m in read_all(kafka.bootstrap, out)]
    assert sorted(written, key=lambda w: w[0]) == [
        ("o1", {"order": {"id": 1}, "payment": {"paid": 1}}, t0 + 5 * MINUTE),
        ("o2", {"order": {"id": 2}, "payment": None}, t0),
        ("o3", {"order": {"id": 3}, "payment": None}, t0 + 20 * MINUTE),
    ]
