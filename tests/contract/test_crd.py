"""The CRD as one source: its copies are byte-equal, every CEL rule has its Python twin, and the
Kubernetes schema extensions and defaulting behave as the apiserver's."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import pytest

from eddy_contract import crd
from eddy_contract.cel import CEL_RULES
from eddy_contract.spec import SpecError, StreamAppSpec
from tests.operator.manifests import CRD_PATH, REPO, RULE_BREAKERS, breaking, minimal

pytestmark = pytest.mark.unit

COPIES = {
    "chart": REPO / "charts" / "eddy-operator" / "crds" / "streamapp.yaml",
    "package": REPO / "contract" / "eddy_contract" / crd.CRD_RESOURCE,
}


@pytest.mark.parametrize("copy", COPIES, ids=list(COPIES))
def test_each_crd_copy_is_byte_equal_to_crds_streamapp(copy):
    assert COPIES[copy].read_bytes() == CRD_PATH.read_bytes(), (
        f"{COPIES[copy].relative_to(REPO)} differs from crds/streamapp.yaml: run "
        f"`cp crds/streamapp.yaml {COPIES[copy].relative_to(REPO)}`"
    )


def test_the_package_reads_the_crd_it_ships():
    assert crd.crd()["metadata"]["name"] == "streamapps.eddy.dev"
    assert 'eddy_contract = ["streamapp-crd.yaml"]' in (REPO / "pyproject.toml").read_text()


def _rules(schema: Mapping[str, Any]) -> Iterator[str]:
    for rule in schema.get("x-kubernetes-validations", ()):
        yield rule["rule"]
    for sub in (schema.get("properties") or {}).values():
        yield from _rules(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from _rules(schema[key])


def test_every_cel_rule_of_the_crd_has_a_python_twin_and_no_twin_is_left_over():
    rules = list(_rules(crd.openapi_schema()))
    update_only = {r for r in rules if "oldSelf" in r}
    assert update_only == {"self == oldSelf"}  # applicationId is immutable: updates only
    assert set(rules) - update_only == set(CEL_RULES)


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in RULE_BREAKERS], ids=[c[0] for c in RULE_BREAKERS])
def test_a_broken_cel_rule_is_reported_with_the_crds_message(change, field):
    body = breaking(change)
    with pytest.raises(SpecError) as err:
        StreamAppSpec.from_manifest(body)
    messages = {r["message"] for _, _, r in crd.rule_sites(crd.with_defaults(body))}
    assert err.value.field == field
    assert err.value.reason in messages


def test_the_apiservers_defaulting_drops_nulls_then_fills_parents_before_children():
    body = minimal(executors=None, state={"size": None, "standbyReplicas": 0})
    defaulted = crd.with_defaults(body)
    assert defaulted["spec"]["executors"]["replicas"] == 2  # null pruned, then `default: {}`, then its children
    assert defaulted["spec"]["state"]["size"] == "1Gi"
    assert defaulted["spec"]["state"]["standbyReplicas"] == 0  # a value given is kept
    assert body["spec"]["executors"] is None  # the input is left alone


def test_metadata_other_than_the_name_is_kubernetes_business():
    body = minimal()
    body["metadata"].update(labels={"a": "b"}, uid="u-1", managedFields=[{"manager": "kubectl"}])
    assert StreamAppSpec.from_manifest(body).name == "wordcount"


def _validates(node: Mapping[str, Any], value: Any) -> bool:
    return jsonschema.Draft4Validator(crd.json_schema(node)).is_valid(value)


def test_kubernetes_schema_extensions_become_json_schema():
    obj = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert not _validates(obj, {"a": "x", "b": 1})  # unknown fields are rejected, as kubectl --validate=strict
    assert _validates({**obj, "x-kubernetes-preserve-unknown-fields": True}, {"a": "x", "b": 1})
    assert _validates({"type": "string", "nullable": True}, None)
    assert not _validates({"type": "string"}, None)
    int_or_string = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert _validates(int_or_string, 3) and _validates(int_or_string, "50%") and not _validates(int_or_string, 1.5)
    assert not _validates({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}, ["a", "a"])
    embedded = {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {"type": "object"}}}
    assert _validates(embedded, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})
    assert _validates({"type": "integer", "format": "int64", "description": "x"}, 2**40)


def test_spec_upgrade_has_no_default_of_its_own_and_its_fields_are_defaulted_when_it_is_given():
    assert "upgrade" not in crd.with_defaults(minimal())["spec"]  # a full manifest stays a fixed point
    assert crd.with_defaults(minimal(upgrade={}))["spec"]["upgrade"] == {
        "mode": "keepState", "resetOffsets": "earliest", "rollback": True, "healthTimeout": "300s"}
