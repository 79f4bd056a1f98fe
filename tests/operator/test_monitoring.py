"""The chart's monitoring objects: the PodMonitor for the StreamApps' pods, the ServiceMonitor for
the operator, and the Grafana dashboard, whose every query names metrics a real scrape returns."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from tests.operator.manifests import REPO, full
from tests.servers import CACHE

CHART = REPO / "charts" / "eddy-operator"
DASHBOARD = CHART / "dashboards" / "eddy.json"
ENABLED = ["--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
           "--set", "metrics.dashboard.enabled=true"]


def _helm(*args: str) -> str:
    helm = CACHE / "k8s" / "bin" / "helm"
    assert helm.exists(), f"{helm} is missing: run infra/k8s/k8s.sh build (make setup)"
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _render(*values: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(_helm("template", "eddy", str(CHART), "--namespace", "eddy-system", *values)):
        if doc:
            out.setdefault(doc["kind"], []).append(doc)
    return out


def matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against `labels`."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _app_pods() -> dict[str, tuple[dict[str, str], list[dict[str, Any]], dict[str, str]]]:
    """Per component, the labels, container ports and env the operator's builders give its pods."""
    from eddy_contract.spec import StreamAppSpec
    from eddy_operator import pod_builders, spark_builders
    from eddy_operator.builders import Owner

    spec = StreamAppSpec.from_manifest(full())
    driver = pod_builders.build_driver_statefulset(spec, Owner(spec.name, "uid-1"), "hash")["spec"]["template"]
    template = pod_builders.build_executor_pod_template(spec)
    # Spark labels executor pods with the template's labels and spark.kubernetes.executor.label.*.
    conf = spark_builders.build_spark_conf(spec, "fast-ssd")
    prefix = "spark.kubernetes.executor.label."
    spark_labels = {k[len(prefix):]: v for k, v in conf.items() if k.startswith(prefix)}

    def env(container: dict[str, Any]) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in container.get("env", [])}

    dc, ec = driver["spec"]["containers"][0], template["spec"]["containers"][0]
    return {
        "driver": (driver["metadata"]["labels"], dc["ports"], env(dc)),
        "executor (template labels)": (template["metadata"]["labels"], ec["ports"], env(ec)),
        "executor (Spark's labels)": (spark_labels, ec["ports"], env(ec)),
        "metrics port": ({}, [], {"port": str(spec.metrics_port)}),
    }


@pytest.mark.integration
@pytest.mark.control_plane  # helm, built with the control plane
@pytest.mark.parametrize("values", [[], ["--set", "watchNamespaces={team-a,team-b}"]])
def test_podmonitor_selects_the_driver_and_executor_pods_the_builders_make_on_their_metrics_port(values):
    rendered = _render(*ENABLED, *values)
    (monitor,) = rendered["PodMonitor"]
    spec = monitor["spec"]
    pods = _app_pods()
    port = pods.pop("metrics port")[2]["port"]
    for component, (labels, ports, env) in pods.items():
        assert matches(spec["selector"], labels), (component, spec["selector"], labels)
        for endpoint in spec["podMetricsEndpoints"]:
            named = {p["name"]: p["containerPort"] for p in ports}
            assert endpoint["port"] in named, (component, endpoint, ports)
            # the port the runtime serves on (EDDY_METRICS_PORT) is the named port
            assert str(named[endpoint["port"]]) == env["EDDY_METRICS_PORT"] == port
            assert endpoint["path"] == "/metrics"
    # not the operator's own pod (the ServiceMonitor scrapes that one)
    (deployment,) = rendered["Deployment"]
    assert not matches(spec["selector"], deployment["spec"]["template"]["metadata"]["labels"])
    if values:
        assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    else:
        assert spec["namespaceSelector"] == {"any": True}


@pytest.mark.integration
@pytest.mark.control_plane  # helm, built with the control plane
def test_servicemonitor_selects_the_operators_metrics_service_whose_port_reaches_the_pod():
    rendered = _render(*ENABLED)
    (monitor,) = rendered["ServiceMonitor"]
    (service,) = [s for s in rendered["Service"] if s["metadata"]["name"].endswith("-metrics")]
    (deployment,) = rendered["Deployment"]
    assert matches(monitor["spec"]["selector"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["eddy-system"]}
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    pod = deployment["spec"]["template"]
    container_ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in service_ports, (endpoint, service_ports)
        assert service_ports[endpoint["port"]]["targetPort"] in container_ports
    assert matches({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])
    # not the apps' pods
    for labels, _, _ in list(_app_pods().values())[:3]:
        assert not matches(monitor["spec"]["selector"], labels)


@pytest.mark.integration
@pytest.mark.control_plane  # helm, built with the control plane
def test_the_dashboard_configmap_carries_the_dashboard_for_grafanas_sidecar_and_the_chart_lints():
    rendered = _render(*ENABLED)
    (configmap,) = [c for c in rendered["ConfigMap"] if c["metadata"]["name"].endswith("-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["eddy.json"]) == json.loads(DASHBOARD.read_text())
    assert not {"PodMonitor", "ServiceMonitor"} & set(_render()), "monitoring objects must be opt-in"
    out = _helm("lint", str(CHART), "--strict", *ENABLED)
    assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out, out


def _expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        query = node.get("query")
        if isinstance(query, dict) and isinstance(query.get("query"), str):
            found.append(query["query"])
        return found + [e for v in node.values() for e in _expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in _expressions(v)]
    return []


@pytest.mark.unit
def test_every_dashboard_query_uses_only_metrics_a_real_scrape_returns():
    from tests.exported_metrics import exported

    scraped = exported().all_samples()
    expressions = _expressions(json.loads(DASHBOARD.read_text()))
    assert len(expressions) >= 20, expressions
    unknown = {}
    used: set[str] = set()
    for expr in expressions:
        names = set(re.findall(r"\beddy_[a-z0-9_]+", expr))
        assert names, f"a query that names no Eddy metric: {expr}"
        used |= names
        if names - scraped:
            unknown[expr] = sorted(names - scraped)
    assert not unknown, f"queries naming metrics no registry exports: {unknown}"
    # Every component has a place on the dashboard.
    for prefix in ("eddy_operator_", "eddy_driver_", "eddy_executor_"):
        assert any(n.startswith(prefix) for n in used), prefix
