"""The StreamApp CRD's CEL rules (`x-kubernetes-validations`) in Python, for manifests that never
meet the apiserver (`eddy run`) and for the operator's own check (docs/DESIGN.md, "The operator's part").

Each twin is keyed by its rule's text in the CRD (tests/contract/test_crd.py checks that the keys
and the CRD's rules are the same set), and the CRD's message is the error's reason: the CRD stays
the one home of what is checked and of what the user reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from eddy_contract import crd

# Spark settings that the executors/driver sections own; setting them in sparkConf would make
# the operator and Spark disagree about how many executors exist and where they run.
RESERVED_SPARK_CONF: tuple[str, ...] = (
    "spark.master",
    "spark.submit.deployMode",
    "spark.executor.instances",
    "spark.dynamicAllocation.enabled",
    "spark.kubernetes.namespace",
    "spark.kubernetes.container.image",
    "spark.kubernetes.executor.podTemplateFile",
)
# What spec.executors.cpu sets; sparkConf may not set it as well.
EXECUTOR_CPU_SPARK_CONF: tuple[str, ...] = (
    "spark.kubernetes.executor.request.cores",
    "spark.kubernetes.executor.limit.cores",
)
# Kafka client settings that carry credentials: only Secret references may provide them.
SECRET_CONFIG_WORDS: tuple[str, ...] = ("password", "secret", "sasl.jaas.config", "ssl.key.pem", "ssl.keystore")
# A Kubernetes label key ([prefix/]name); `[.]` rather than `\.` so the CEL string needs no escape.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_KEY_RE = re.compile(LABEL_KEY_PATTERN)
_CREDENTIAL_KEYS = " || ".join(f"k.lowerAscii().contains('{w}')" for w in SECRET_CONFIG_WORDS)
_RESERVED_KEYS = ", ".join(f"'{k}'" for k in RESERVED_SPARK_CONF)


def cpu_cores(quantity: str) -> float:
    """A CPU quantity as the CRD's pattern allows it ("500m", "2", "1.5") in cores."""
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _first_key(judged: Mapping[str, Any], bad: Callable[[str], bool]) -> str | None:
    return next((f".{k}" for k in judged if bad(k)), None)


def _holds(ok: bool) -> str | None:
    return None if ok else ""


# Each twin judges the value at its rule's place and returns None when the rule holds, else where
# below that place it breaks ("" for the place itself, or the rule's fieldPath).
CEL_RULES: Mapping[str, Callable[[Any], str | None]] = MappingProxyType(
    {
        "self.state.standbyReplicas < self.executors.replicas": lambda s: _holds(
            s["state"]["standbyReplicas"] < s["executors"]["replicas"]
        ),
        "self.minReplicas <= self.maxReplicas": lambda a: _holds(a["minReplicas"] <= a["maxReplicas"]),
        "!has(self.request) || !has(self.limit) || quantity(self.request).compareTo(quantity(self.limit)) <= 0":
            lambda cpu: _holds("request" not in cpu or "limit" not in cpu
                               or cpu_cores(cpu["request"]) <= cpu_cores(cpu["limit"])),
        "!has(self.executors.cpu) || !has(self.sparkConf) || !self.sparkConf.exists(k, k in "
        "['spark.kubernetes.executor.request.cores', 'spark.kubernetes.executor.limit.cores'])": lambda s: _holds(
            "cpu" not in s["executors"] or not set(s.get("sparkConf", {})) & set(EXECUTOR_CPU_SPARK_CONF)),
        "!has(self.deadLetterTopic) || self.badRecordPolicy == 'dead-letter'": lambda s: _holds(
            "deadLetterTopic" not in s or s["badRecordPolicy"] == "dead-letter"
        ),
        "self.protocol.startsWith('SASL_') == has(self.sasl)": lambda sec: _holds(
            sec["protocol"].startswith("SASL_") == ("sasl" in sec)
        ),
        "!has(self.tls) || self.protocol.endsWith('SSL')": lambda sec: _holds(
            "tls" not in sec or sec["protocol"].endswith("SSL")
        ),
        "has(self.certSecretRef) == has(self.keySecretRef)": lambda tls: _holds(
            ("certSecretRef" in tls) == ("keySecretRef" in tls)
        ),
        f"!self.exists(k, {_CREDENTIAL_KEYS})": lambda config: _first_key(
            config, lambda k: any(w in k.lower() for w in SECRET_CONFIG_WORDS)
        ),
        "!('bootstrap.servers' in self)": lambda config: _first_key(config, lambda k: k == "bootstrap.servers"),
        "!has(self.minInsyncReplicas) || self.replicationFactor == -1 "
        "|| self.minInsyncReplicas <= self.replicationFactor": lambda t: _holds(
            "minInsyncReplicas" not in t
            or t["replicationFactor"] == -1
            or t["minInsyncReplicas"] <= t["replicationFactor"]
        ),
        "self != 0": lambda value: _holds(value != 0),
        f"!self.exists(k, k in [{_RESERVED_KEYS}])": lambda conf: _first_key(conf, RESERVED_SPARK_CONF.__contains__),
        f"self.all(k, k.matches('{LABEL_KEY_PATTERN}'))": lambda labels: _first_key(
            labels, lambda k: not _LABEL_KEY_RE.match(k)
        ),
    }
)


def broken_rules(body: Mapping[str, Any]) -> Iterator[crd.SchemaProblem]:
    """The rules a defaulted, schema-valid manifest breaks, parents before children. Rules on
    `oldSelf` judge updates only (an immutable field): there is no old object here."""
    for path, judged, rule in crd.rule_sites(body):
        if "oldSelf" in rule["rule"]:
            continue
        where = CEL_RULES[rule["rule"]](judged)
        if where is not None:
            yield crd.SchemaProblem(path + (where or rule.get("fieldPath", "")), rule["message"])
