"""The one place that builds Kafka client settings and creates confluent-kafka clients.

Every client Eddy makes (the driver's admin and offsets consumer, a task's committer producer and
consumer, the restore / standby consumer, the range reader, ``eddy run``'s admin, feeder and
output watcher) is made by `consumer`, `producer` or `admin` from a `KafkaClientConfig`.

`KafkaClientConfig` holds what the StreamApp says and nothing secret: the bootstrap servers,
``spec.kafka.config``, the security protocol and the SASL mechanism. It is pickled into Spark task
closures (`protocol.work.BatchSettings`). Credentials are read from the environment of the process that
creates a client, when it creates it:

- ``EDDY_KAFKA_SASL_USERNAME``, ``EDDY_KAFKA_SASL_PASSWORD`` (protocols ``SASL_*``);
- ``EDDY_KAFKA_SSL_CA_LOCATION``, ``EDDY_KAFKA_SSL_CERTIFICATE_LOCATION``,
  ``EDDY_KAFKA_SSL_KEY_LOCATION`` (protocols ``SSL`` and ``SASL_SSL``).

On Kubernetes the operator sets them in the driver and executor pods from the StreamApp's Secret
references (`eddy_operator.builders`); for ``eddy run`` the user exports them, and Spark's
``local-cluster`` executors inherit the driver's environment. So a password never travels in a
closure, a SparkConf or a log line.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient
    from tenacity import RetryCallState

    from eddy_contract.spec import StreamAppSpec

T = TypeVar("T")

__all__ = [
    "MOVING_ERRORS",
    "is_retriable",
    "retrying",
    "CREDENTIAL_ENV",
    "KafkaAuthenticationFailed",
    "KafkaClientConfig",
    "KafkaCredentialsMissing",
    "KafkaUnreachable",
    "admin",
    "check_connection",
    "consumer",
    "producer",
]

log = logging.getLogger(__name__)

SASL_USERNAME_ENV = "EDDY_KAFKA_SASL_USERNAME"
SASL_PASSWORD_ENV = "EDDY_KAFKA_SASL_PASSWORD"
#: environment variable -> librdkafka setting, for the TLS files a client reads
TLS_FILE_ENV: tuple[tuple[str, str], ...] = (
    ("EDDY_KAFKA_SSL_CA_LOCATION", "ssl.ca.location"),
    ("EDDY_KAFKA_SSL_CERTIFICATE_LOCATION", "ssl.certificate.location"),
    ("EDDY_KAFKA_SSL_KEY_LOCATION", "ssl.key.location"),
)
CREDENTIAL_ENV: tuple[str, ...] = (SASL_USERNAME_ENV, SASL_PASSWORD_ENV, *(var for var, _ in TLS_FILE_ENV))


class KafkaCredentialsMissing(RuntimeError):
    """The app's Kafka security needs credentials that this process's environment lacks."""


class KafkaUnreachable(RuntimeError):
    """No broker of the app's Kafka answered."""


class KafkaAuthenticationFailed(KafkaUnreachable):
    """The brokers refused this client's credentials or its TLS handshake."""


@dataclass(frozen=True)
class KafkaClientConfig:
    """Where the app's Kafka is and how to talk to it, without secrets (safe to pickle and log)."""

    bootstrap: str
    #: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``
    protocol: str = "PLAINTEXT"
    #: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (None without SASL)
    sasl_mechanism: str | None = None
    #: ``spec.kafka.config``: librdkafka settings the spec validated as not secret
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_spec(cls, spec: StreamAppSpec) -> KafkaClientConfig:
        security = spec.kafka.security
        return cls(
            bootstrap=spec.kafka.bootstrap_servers,
            protocol=security.protocol.value,
            sasl_mechanism=security.sasl.mechanism.value if security.sasl is not None else None,
            settings=tuple(sorted((str(k), str(v)) for k, v in spec.kafka.config.items())),
        )

    @classmethod
    def of(cls, kafka: KafkaClientConfig | str) -> KafkaClientConfig:
        """A config as given, or a PLAINTEXT one for a bare bootstrap string."""
        return kafka if isinstance(kafka, KafkaClientConfig) else cls(bootstrap=kafka)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def client_settings(self, defaults: Mapping[str, Any] | None = None,
                        env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """librdkafka settings for a client made now: the caller's `defaults`, overridden by
        ``spec.kafka.config`` (as Kafka Streams lets users override its client defaults), then the
        security settings with credentials from `env` (default: this process's environment).

        Raises `KafkaCredentialsMissing` naming the variables when SASL credentials are absent.
        """
        env = os.environ if env is None else env
        conf: dict[str, Any] = {**(defaults or {}), "bootstrap.servers": self.bootstrap, **dict(self.settings)}
        if self.protocol != "PLAINTEXT":
            conf["security.protocol"] = self.protocol
        if self.uses_sasl:
            missing = [v for v in (SASL_USERNAME_ENV, SASL_PASSWORD_ENV) if not env.get(v)]
            if missing:
                raise KafkaCredentialsMissing(
                    f"spec.kafka.security.protocol is {self.protocol}: set {' and '.join(missing)} in the "
                    f"environment (on Kubernetes the operator sets them from spec.kafka.security.sasl's "
                    f"Secret references; for eddy run, export them)"
                )
            conf["sasl.mechanism"] = self.sasl_mechanism or "PLAIN"
            conf["sasl.username"] = env[SASL_USERNAME_ENV]
            conf["sasl.password"] = env[SASL_PASSWORD_ENV]
        if self.uses_tls:
            for var, key in TLS_FILE_ENV:
                if env.get(var):
                    conf[key] = env[var]
        return conf

    def describe(self) -> str:
        """For log lines and errors: no credentials."""
        how = self.protocol + (f"/{self.sasl_mechanism}" if self.sasl_mechanism else "")
        return f"{self.bootstrap} ({how})"


def consumer(cfg: KafkaClientConfig | str, settings: Mapping[str, Any] | None = None) -> Consumer:
    """A `confluent_kafka.Consumer` for `cfg`; `settings` are the caller's (group id, fetch sizes...)."""
    from confluent_kafka import Consumer

    return Consumer(KafkaClientConfig.of(cfg).client_settings(settings))


def producer(cfg: KafkaClientConfig | str, settings: Mapping[str, Any] | None = None) -> Producer:
    """A `confluent_kafka.Producer` for `cfg` (transactional when `settings` name a transactional.id)."""
    from confluent_kafka import Producer

    return Producer(KafkaClientConfig.of(cfg).client_settings(settings))


def admin(cfg: KafkaClientConfig | str, settings: Mapping[str, Any] | None = None) -> AdminClient:
    """A `confluent_kafka.admin.AdminClient` for `cfg`."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(KafkaClientConfig.of(cfg).client_settings(settings))


#: librdkafka errors that retrying cannot fix: a refused login, a failed TLS handshake
_REFUSALS = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")


def check_connection(cfg: KafkaClientConfig | str, timeout_s: float = 30.0) -> None:
    """Reach the brokers once; a refused login or TLS handshake fails at once, naming the reason.

    Without this, a wrong password looks like a broker that does not answer: every request times
    out and librdkafka retries forever.
    """
    from confluent_kafka import KafkaException

    kc = KafkaClientConfig.of(cfg)
    refused: list[str] = []

    def on_error(err: Any) -> None:
        if err.name() in _REFUSALS:
            refused.append(err.str())

    client = admin(kc, {"error_cb": on_error})
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            client.list_topics(timeout=1.0)
            return
        except KafkaException as e:
            last = str(e.args[0].str() if e.args else e)
        client.poll(0)  # delivers the error callbacks queued meanwhile
        if refused:
            raise KafkaAuthenticationFailed(f"Kafka at {kc.describe()}: login or TLS handshake failed: {refused[0]}")
        if time.monotonic() > deadline:
            raise KafkaUnreachable(f"Kafka at {kc.describe()} did not answer within {timeout_s:g} s: {last}")


#: What a leader or coordinator moving to another broker (one stopped or restarted) answers for a
#: moment; Kafka's Java clients retry all of them, librdkafka's admin calls do not flag them all.
MOVING_ERRORS = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_LEADER",
                 "LEADER_NOT_AVAILABLE", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE",
                 "REPLICA_NOT_AVAILABLE", "NOT_ENOUGH_REPLICAS", "BROKER_NOT_AVAILABLE")


def is_retriable(e: BaseException) -> bool:
    """A Kafka error worth another try: flagged retriable, or one of the `MOVING_ERRORS`."""
    from confluent_kafka import KafkaException

    if not isinstance(e, KafkaException):
        return False
    err = e.args[0] if e.args else None
    flagged = bool(getattr(err, "retriable", lambda: False)())
    return flagged or any(code in str(e) for code in MOVING_ERRORS)


def retrying(fn: Callable[[], T], what: str, attempts: int = 20) -> T:
    """`fn()`, again after retriable Kafka errors (`is_retriable`), backing off from 0.1 s to 2 s;
    the last error is raised as it is after `attempts` tries."""
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    def note(state: RetryCallState) -> None:
        log.info("%s: %s; retrying", what, state.outcome.exception() if state.outcome else "?")

    for attempt in Retrying(retry=retry_if_exception(is_retriable), stop=stop_after_attempt(attempts),
                            wait=wait_exponential(multiplier=0.1, max=2.0), before_sleep=note, reraise=True):
        with attempt:
            return fn()
    raise AssertionError("unreachable: tenacity re-raises the last error")
