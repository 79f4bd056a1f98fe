"""One Kafka client configuration: every client is made by eddy_runtime.kafka.client, and the
configuration that travels to executors carries no secret."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest
from pyspark import cloudpickle

from eddy_contract.spec import StreamAppSpec
from eddy_runtime.kafka.client import KafkaClientConfig, KafkaCredentialsMissing
from eddy_runtime.protocol.work import BatchSettings

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CLIENT_CLASSES = {"Consumer", "Producer", "AdminClient", "DeserializingConsumer", "SerializingProducer"}
PASSWORD = "s3cret-Passw0rd-for-tests"


def secured_spec(**config: str) -> StreamAppSpec:
    return StreamAppSpec.from_manifest({
        "apiVersion": "eddy.dev/v1alpha1", "kind": "StreamApp", "metadata": {"name": "wc"},
        "spec": {"image": "eddy:test", "pipeline": {"module": "examples.wordcount.app"},
                 "kafka": {"bootstrapServers": "kafka-0:9093", "config": dict(config),
                           "security": {"protocol": "SASL_SSL",
                                        "sasl": {"mechanism": "SCRAM-SHA-512",
                                                 "usernameSecretRef": {"name": "kafka-user", "key": "username"},
                                                 "passwordSecretRef": {"name": "kafka-user", "key": "password"}},
                                        "tls": {"caSecretRef": {"name": "kafka-ca", "key": "ca.crt"}}}}},
    })


def client_constructions(root: Path, base: Path = REPO) -> list[str]:
    """Every call of a confluent-kafka client class under `root`, as ``path:line`` (from `base`)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in CLIENT_CLASSES:
                    found.append(f"{path.relative_to(base)}:{node.lineno}")
    return found


def test_only_kafka_client_constructs_kafka_clients() -> None:
    calls = client_constructions(REPO / "runtime") + client_constructions(REPO / "operator")
    outside = [c for c in calls if not c.startswith("runtime/eddy_runtime/kafka/client.py:")]
    assert outside == [], f"Kafka clients made outside eddy_runtime/kafka/client.py: {outside}"
    assert len(calls) == 3, calls  # consumer(), producer(), admin(): the scan does see them


def test_the_scan_finds_client_constructions_however_imported(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import confluent_kafka as ck\nfrom confluent_kafka.admin import AdminClient\n"
                                   "c = ck.Consumer({})\n\ndef f():\n    return AdminClient({})\n")
    assert client_constructions(tmp_path, tmp_path) == ["m.py:3", "m.py:6"]


def test_client_settings_take_credentials_from_the_environment() -> None:
    cfg = KafkaClientConfig.from_spec(secured_spec(**{"fetch.max.bytes": "1048576"}))
    env = {"EDDY_KAFKA_SASL_USERNAME": "eddy", "EDDY_KAFKA_SASL_PASSWORD": PASSWORD,
           "EDDY_KAFKA_SSL_CA_LOCATION": "/opt/eddy/kafka-tls/ca.crt"}
    conf = cfg.client_settings({"group.id": "g", "fetch.max.bytes": 1}, env)
    assert conf == {
        "bootstrap.servers": "kafka-0:9093", "group.id": "g",
        "fetch.max.bytes": "1048576",  # spec.kafka.config wins over Eddy's defaults
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "eddy", "sasl.password": PASSWORD, "ssl.ca.location": "/opt/eddy/kafka-tls/ca.crt",
    }


def test_plaintext_ignores_credentials_in_the_environment() -> None:
    env = {"EDDY_KAFKA_SASL_USERNAME": "eddy", "EDDY_KAFKA_SASL_PASSWORD": PASSWORD,
           "EDDY_KAFKA_SSL_CA_LOCATION": "/ca.crt"}
    assert KafkaClientConfig.of("127.0.0.1:9092").client_settings(None, env) == {"bootstrap.servers": "127.0.0.1:9092"}


def test_missing_sasl_credentials_are_named() -> None:
    cfg = KafkaClientConfig.from_spec(secured_spec())
    with pytest.raises(KafkaCredentialsMissing, match="EDDY_KAFKA_SASL_PASSWORD") as e:
        cfg.client_settings(None, {"EDDY_KAFKA_SASL_USERNAME": "eddy"})
    assert "EDDY_KAFKA_SASL_USERNAME" not in str(e.value).split("set ")[1].split(" in the")[0]


def test_batch_settings_travel_to_executors_without_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDDY_KAFKA_SASL_USERNAME", "eddy")
    monkeypatch.setenv("EDDY_KAFKA_SASL_PASSWORD", PASSWORD)
    cfg = KafkaClientConfig.from_spec(secured_spec())
    assert cfg.client_settings()["sasl.password"] == PASSWORD
    settings = BatchSettings(app="wc", batch_id=1, generation=1, kafka=cfg, guarantee="exactly_once",
                             bad_record_policy="fail", dead_letter_topic=None, state_dir="/state",
                             per_executor_state_dirs=False)

    def task(it):  # a closure like the driver's partition functions
        return [settings.kafka.bootstrap for _ in it]

    for blob in (pickle.dumps(cfg), pickle.dumps(settings), cloudpickle.dumps(task)):
        assert PASSWORD.encode() not in blob
        assert b"sasl.password" not in blob
    assert PASSWORD not in repr(settings) and PASSWORD not in cfg.describe()
    assert pickle.loads(pickle.dumps(settings)).kafka == cfg
