"""The Helm chart lints, validates and installs (tests/contract/test_crd.py checks its CRD is the repository's)."""

from __future__ import annotations

import pytest

from tests.operator.manifests import REPO

CHART = REPO / "charts" / "eddy-operator"


# --- against the real control plane's schemas --------------------------------------------------


def _kube_json_schemas(kube, out_dir):
    """Strict JSON schemas, one file per kind, named as kubeconform looks them up
    (`<kind><kindSuffix>.json`), from the apiserver's own OpenAPI and from our CRD; nothing is
    fetched from the internet."""
    import json

    from tests.operator.manifests import crd

    doc = json.loads(kube.kubectl("get", "--raw", "/openapi/v2").stdout)
    definitions = _strict(doc["definitions"])
    for name, schema in doc["definitions"].items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            suffix = "-" + (gvk["group"].split(".")[0] + "-" if gvk["group"] else "") + gvk["version"]
            body = {"$ref": f"#/definitions/{name}", "definitions": definitions}
            (out_dir / f"{gvk['kind'].lower()}{suffix}.json").write_text(json.dumps(body))
    version = crd()["spec"]["versions"][0]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"].pop("additionalProperties", None)  # any ObjectMeta field
    (out_dir / f"streamapp-eddy-{version['name']}.json").write_text(json.dumps(schema))
    return out_dir


def _strict(node, key=None):
    """What kubeconform's openapi2jsonschema does for its -strict schemas: no undeclared
    properties, int-or-string and quantities as either type."""
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    if node.get("format") == "quantity":
        return {"oneOf": [{"type": "string"}, {"type": "number"}]}
    out = {k: (_strict(v, k) if k != "properties" else {p: _strict(s) for p, s in v.items()}) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _kubeconform(kube, schemas, manifests: str):
    import subprocess

    proc = subprocess.run(
        [
            str(kube.bin_dir / "kubeconform"),
            "-strict",
            "-summary",
            "-output",
            "text",
            "-schema-location",
            f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            "-",
        ],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc


def _helm(kube, *args, check=True):
    import subprocess

    proc = subprocess.run(
        [str(kube.bin_dir / "helm"), "--kubeconfig", str(kube.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.integration
@pytest.mark.parametrize(
    "values",
    [
        [],
        [
            "--set",
            "watchNamespaces={team-a,team-b}",
            "--set",
            "metrics.serviceMonitor.enabled=false",
            "--set",
            "logLevel=debug",
        ],
    ],
)
def test_helm_lint_is_clean(kube, values):
    proc = _helm(kube, "lint", str(CHART), "--strict", *values)
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.integration
def test_helm_template_passes_kubeconform_strict_with_the_crd_schema(kube, tmp_path):
    import yaml

    schemas = _kube_json_schemas(kube, tmp_path)
    for values in ([], ["--set", "watchNamespaces={team-a,team-b}"]):
        rendered = _helm(
            kube,
            "template",
            "eddy",
            str(CHART),
            "--namespace",
            "eddy-system",
            "--include-crds",
            "--kube-version",
            "1.34.0",
            *values,
        ).stdout
        proc = _kubeconform(kube, schemas, rendered)
        print(f"\nhelm template {' '.join(values)} | kubeconform -strict: {proc.stdout.strip().splitlines()[-1]}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Invalid: 0, Errors: 0, Skipped: 0" in proc.stdout, proc.stdout
    # the example StreamApp against the CRD's schema, and a broken one rejected
    example = (REPO / "examples" / "wordcount" / "streamapp.yaml").read_text()
    assert _kubeconform(kube, schemas, example).returncode == 0
    broken = yaml.safe_load(example)
    broken["spec"]["executors"]["replica"] = 3
    proc = _kubeconform(kube, schemas, yaml.safe_dump(broken))
    assert proc.returncode != 0 and "replica" in proc.stdout


@pytest.mark.integration
def test_the_operators_builders_produce_schema_valid_objects(kube, tmp_path):
    import yaml

    from eddy_contract.spec import StreamAppSpec
    from eddy_operator import builders, pod_builders, spark_builders
    from eddy_operator.builders import Owner
    from tests.operator.manifests import full

    schemas = _kube_json_schemas(kube, tmp_path)
    body = full()
    spec = StreamAppSpec.from_manifest(body)
    objs = spark_builders.build_all(spec, Owner(spec.name, "uid-1"), "fast-ssd", body["spec"])
    objs.append(builders.build_assignment_configmap(spec, Owner(spec.name, "uid-1"), {"assignment.json": "{}"}))
    template = pod_builders.build_executor_pod_template(spec)
    template["metadata"]["name"] = "template"
    template["spec"]["containers"][0]["image"] = spec.image  # Spark sets it
    objs.append(template)
    proc = _kubeconform(kube, schemas, yaml.safe_dump_all(objs))
    print(f"\nbuilders | kubeconform -strict: {proc.stdout.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.integration
def test_helm_install_creates_the_charts_objects(kube, namespace):
    import json

    release = f"eddy-{namespace}"
    _helm(
        kube,
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        f"watchNamespaces={{{namespace}}}",
        "--wait",
        "--timeout",
        "120s",
    )
    try:
        names = {}
        for kind in ("deployment", "serviceaccount", "service", "role", "rolebinding", "poddisruptionbudget"):
            items = json.loads(
                kube.kubectl(
                    "get", kind, "-n", namespace, "-l", f"app.kubernetes.io/instance={release}", "-o", "json"
                ).stdout
            )["items"]
            names[kind] = sorted(i["metadata"]["name"] for i in items)
        for kind in ("clusterrole", "clusterrolebinding"):
            items = json.loads(
                kube.kubectl("get", kind, "-l", f"app.kubernetes.io/instance={release}", "-o", "json").stdout
            )["items"]
            names[kind] = sorted(i["metadata"]["name"] for i in items)
        full_name = f"{release}-eddy-operator"
        assert names == {
            "deployment": [full_name],
            "serviceaccount": [full_name],
            "service": [f"{full_name}-metrics"],
            "role": sorted([full_name, f"{full_name}-leader-election"]),
            "rolebinding": sorted([full_name, f"{full_name}-leader-election"]),
            "poddisruptionbudget": [full_name],
            "clusterrole": [f"{full_name}-cluster"],
            "clusterrolebinding": [f"{full_name}-cluster"],
        }
        kube.kubectl("get", "crd", "streamapps.eddy.dev")
        deploy = json.loads(kube.kubectl("get", "deployment", full_name, "-n", namespace, "-o", "json").stdout)
        pod = deploy["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert deploy["status"].get("readyReplicas") == 2
        # the replicas' ServiceAccount may take and renew its Lease, and only that one
        sa = f"system:serviceaccount:{namespace}:{full_name}"
        for verb, resource, allowed in [
            ("create", "leases.coordination.k8s.io", "yes"),
            ("get", f"leases.coordination.k8s.io/{full_name}", "yes"),
            ("update", f"leases.coordination.k8s.io/{full_name}", "yes"),
            ("update", "leases.coordination.k8s.io/someone-elses", "no"),
            # kopf finds the resources it serves by listing and watching the CRDs; it changes none
            ("list", "customresourcedefinitions.apiextensions.k8s.io", "yes"),
            ("watch", "customresourcedefinitions.apiextensions.k8s.io", "yes"),
            ("update", "customresourcedefinitions.apiextensions.k8s.io", "no"),
        ]:
            proc = kube.kubectl("auth", "can-i", verb, resource, "-n", namespace, "--as", sa, check=False)
            assert proc.stdout.strip() == allowed, (verb, resource, proc.stdout, proc.stderr)
        print(f"\nhelm install {release}: {names}")
    finally:
        _helm(kube, "uninstall", release, "--namespace", namespace, check=False)


def _render(kube, *values):
    import yaml

    out = _helm(kube, "template", "eddy", str(CHART), "--namespace", "eddy-system", *values).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


@pytest.mark.integration
def test_the_chart_runs_two_replicas_that_elect_a_leader_and_survive_a_drain(kube):
    objs = _render(kube)
    deploy = objs[("Deployment", "eddy-eddy-operator")]
    assert deploy["spec"]["replicas"] == 2
    # a rollout starts a standby before it stops a replica
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deploy["spec"]["strategy"] == rolling
    pod = deploy["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert {k: env[k]["value"] for k in env if k.startswith("EDDY_OPERATOR_LEASE")} == {
        "EDDY_OPERATOR_LEASE_NAME": "eddy-eddy-operator",
        "EDDY_OPERATOR_LEASE_DURATION": "15",
        "EDDY_OPERATOR_LEASE_RENEW": "5",
        "EDDY_OPERATOR_LEASE_RETRY": "2",
    }
    assert env["EDDY_OPERATOR_LEADER_ELECTION"]["value"] == "true"
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    assert "--liveness=http://0.0.0.0:8081/healthz" in c["args"]
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    pdb = objs[("PodDisruptionBudget", "eddy-eddy-operator")]
    assert pdb["spec"] == {"minAvailable": 1, "selector": deploy["spec"]["selector"]}
    role = objs[("Role", "eddy-eddy-operator-leader-election")]
    assert role["metadata"]["namespace"] == "eddy-system"
    assert [(r["verbs"], r.get("resourceNames")) for r in role["rules"]] == [
        (["create"], None),
        (["get", "update"], ["eddy-eddy-operator"]),
    ]
    # a user's affinity replaces the default one
    custom = _render(kube, "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                     ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
                     "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                     ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists")
    assert list(custom[("Deployment", "eddy-eddy-operator")]["spec"]["template"]["spec"]["affinity"]) == [
        "nodeAffinity"
    ]


@pytest.mark.integration
def test_one_replica_has_no_pdb_and_no_election_means_one_recreated_replica(kube):
    single = _render(kube, "--set", "replicaCount=1")
    assert ("PodDisruptionBudget", "eddy-eddy-operator") not in single
    assert single[("Deployment", "eddy-eddy-operator")]["spec"]["replicas"] == 1
    off = _render(kube, "--set", "replicaCount=1", "--set", "leaderElection.enabled=false")
    deploy = off[("Deployment", "eddy-eddy-operator")]
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert ("Role", "eddy-eddy-operator-leader-election") not in off
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["EDDY_OPERATOR_LEADER_ELECTION"] == "false"
    proc = _helm(kube, "template", "eddy", str(CHART), "--set", "leaderElection.enabled=false", check=False)
    assert proc.returncode != 0 and "replicaCount > 1 needs leaderElection.enabled" in proc.stderr, proc.stderr
