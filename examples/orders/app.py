"""Orders matched with their payments: a windowed stream-stream join.

Both topics are keyed by order id and have the same partition count. An order and a payment of
the same id join when their timestamps are at most `window` apart (10 minutes here, with a
minute of grace for records that arrive late); every match writes the paid order. Each side's
recent records live in a RocksDB window store with a changelog, so a restart or a failover does
not forget an order still waiting for its payment. With ``how: left`` an order that found no
payment by the time its window closed is written too, with a null payment.
"""

from __future__ import annotations

import json

from eddy_runtime.dsl.pipeline import Topology, join_windows


def paid(order: str, payment: str | None) -> str:
    """The paid order: the order's and the payment's JSON, side by side (payment null: unpaid
    within the window, with how="left")."""
    return json.dumps({"order": json.loads(order), "payment": None if payment is None else json.loads(payment)})


def build(topology: Topology, orders_topic: str = "orders", payments_topic: str = "payments",
          output_topic: str = "paid-orders", window: str = "10m", grace: str = "1m", how: str = "inner") -> None:
    orders = topology.stream(orders_topic)
    payments = topology.stream(payments_topic)
    orders.join(payments, paid, windows=join_windows(window, grace), how=how,  # type: ignore[arg-type]
                name="paid").to(output_topic)
