"""Word count on real pods against a secured Kafka: the StreamApp's ``spec.kafka.security`` says
SASL_SSL with SCRAM-SHA-512 and references Secrets for the user, the password and the CA; the
operator puts them into the driver's and the executors' pods, and every Kafka client of the app
(driver, task runners, committers, restore and standby consumers) connects to the broker's
SASL_SSL listener with them. Counts exact."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.wordcount import WordCount, delete_namespace, deploy_word_count, until
from eddy_operator import builders
from tests.operator.cluster import report
from tests.servers import KafkaBroker, NodeCluster

pytestmark = pytest.mark.e2e

NAMESPACE = "wordcount-sasl"


@pytest.fixture
def secured_wordcount(operator: NodeCluster, kafka: KafkaBroker, tmp_path: Path
                      ) -> Iterator[WordCount]:
    app = deploy_word_count(operator, kafka, NAMESPACE, executors=2, standbys=1, listener="sasl_ssl")
    try:
        yield app
    finally:
        app.close(tmp_path)
        delete_namespace(operator, NAMESPACE)


def test_word_count_on_pods_over_sasl_ssl_with_credentials_from_secrets(secured_wordcount: WordCount):
    app = secured_wordcount
    t0 = time.monotonic()
    driver = until(lambda: app.pod(builders.driver_pod_name("wordcount")), 120, "the driver pod")
    env = {e.name: e for e in driver.spec.containers[0].env}
    assert env["EDDY_KAFKA_SASL_PASSWORD"].value_from.secret_key_ref.name == "kafka-user"
    assert env["EDDY_KAFKA_SASL_PASSWORD"].value is None, "the password is referenced, never inlined"
    until(app.running_executors, 400, "2 executor pods running with their ids", alive=app.check_driver, interval=2)
    app.feed(2000)
    app.counted_everything(400, "the input counted over SASL_SSL")
    app.feed(1000)
    app.counted_everything(240, "more input counted over SASL_SSL")
    assert app.kafka.secure_bootstrap in app.kubectl("get", "sapp", "wordcount", "-o",
                                                     "jsonpath={.spec.kafka.bootstrapServers}")
    assert app.kafka.credentials.password not in app.driver_log(tail=5000)
    report(f"\ncounted {len(app.fed)} lines exactly over SASL_SSL {time.monotonic() - t0:.0f}s after kubectl apply")
