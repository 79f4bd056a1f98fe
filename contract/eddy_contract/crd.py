"""The StreamApp CRD's schema as the Python side applies it: the apiserver's null pruning,
defaulting and structural validation, for `eddy_contract.spec` (docs/DESIGN.md, "The operator's part").

The CRD ships in this package (`streamapp-crd.yaml`, a copy of the repository's `crds/streamapp.yaml`
that tests/contract/test_crd.py keeps byte-equal), so the operator's image and `eddy run` read the
very schema the apiserver enforces. The `x-kubernetes-validations` (CEL) rules are not evaluated
here: `rule_sites` hands each one, with the value it judges, to the Python twins in `spec`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

CRD_RESOURCE = "streamapp-crd.yaml"

# OpenAPI v3 keywords that validate; the rest (description, format, default, example...) annotate.
# Formats stay annotations: the CRD uses only int64 and date-time, both on status or integers.
_VALIDATING = frozenset(
    {
        "type", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "minItems", "maxItems", "uniqueItems", "minProperties",
        "maxProperties", "required", "allOf", "anyOf", "oneOf", "not",
    }
)  # fmt: skip
_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


@dataclass(frozen=True)
class SchemaProblem:
    """Where a manifest breaks the schema (`spec.state.size`) and why, in words a user acts on."""

    field: str
    reason: str


@cache
def crd() -> Mapping[str, Any]:
    """The CustomResourceDefinition, as shipped in this package (read once)."""
    text = resources.files("eddy_contract").joinpath(CRD_RESOURCE).read_text(encoding="utf-8")
    loaded: Mapping[str, Any] = yaml.safe_load(text)
    return loaded


def openapi_schema() -> Mapping[str, Any]:
    """The `openAPIV3Schema` of the stored version."""
    (version,) = [v for v in crd()["spec"]["versions"] if v.get("storage")]
    schema: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def with_defaults(obj: Any, schema: Mapping[str, Any] | None = None) -> Any:
    """A plain copy of `obj` as the apiserver stores it: nulls of non-nullable fields dropped, then
    each missing property that has a `default` set to it, parents before children (so a
    `default: {}` object gets its children's defaults too)."""
    schema = openapi_schema() if schema is None else schema
    obj = _plain(obj)
    if isinstance(obj, dict) and "properties" in schema:
        properties: Mapping[str, Any] = schema["properties"]
        for name in [n for n, v in obj.items() if v is None and not properties.get(n, {}).get("nullable")]:
            del obj[name]
        for name, sub in properties.items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                obj[name] = with_defaults(obj[name], sub)
    elif isinstance(obj, dict) and isinstance(schema.get("additionalProperties"), Mapping):
        obj = {k: with_defaults(v, schema["additionalProperties"]) for k, v in obj.items()}
    elif isinstance(obj, list) and "items" in schema:
        obj = [with_defaults(item, schema["items"]) for item in obj]
    return obj


def problems(obj: Any, hints: Mapping[str, str]) -> list[SchemaProblem]:
    """What the schema rejects in `obj` (defaulted first, see `with_defaults`), sorted by field.
    `status` is the apiserver's to check. `hints`: per field path (list indices as `[]`), what a
    value matching the field's pattern looks like ("a size like 512Mi")."""
    found = [_problem(e, hints) for e in _validator().iter_errors(obj)]
    return sorted(found, key=lambda p: (p.field, p.reason))


def rule_sites(
    obj: Any, schema: Mapping[str, Any] | None = None, path: str = ""
) -> Iterator[tuple[str, Any, Mapping[str, Any]]]:
    """Each CEL rule (`x-kubernetes-validations` entry) with the value it judges and that value's
    path, parents before children; values that are absent are not judged, as by the apiserver."""
    schema = openapi_schema() if schema is None else schema
    for rule in schema.get("x-kubernetes-validations", ()):
        yield path, obj, rule
    if isinstance(obj, Mapping):
        for name, sub in (schema.get("properties") or {}).items():
            if name in obj:
                yield from rule_sites(obj[name], sub, _join(path, name))
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, value in obj.items():
                yield from rule_sites(value, extra, _join(path, key))
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            yield from rule_sites(item, schema["items"], f"{path}[{i}]")


def json_schema(node: Mapping[str, Any], *, open_object: bool = False) -> dict[str, Any]:
    """A Kubernetes structural schema as plain JSON Schema (draft 4, which OpenAPI v3.0 follows).

    The Kubernetes extensions: an object's unknown fields are rejected (as by `kubectl`'s strict
    field validation) unless `x-kubernetes-preserve-unknown-fields`; `nullable` admits null;
    `x-kubernetes-int-or-string` admits either; `x-kubernetes-embedded-resource` admits
    apiVersion, kind and metadata; `x-kubernetes-list-type: set` means unique items (the keys of a
    `map` list are left to the apiserver). `open_object`: keep unknown fields (ObjectMeta)."""
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in node.items() if k in _VALIDATING}
    for keyword in ("allOf", "anyOf", "oneOf"):
        if keyword in out:
            out[keyword] = [json_schema(s) for s in node[keyword]]
    if "not" in out:
        out["not"] = json_schema(node["not"])
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        out["type"] = [*_as_list(out["type"]), "null"]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "items" in node:
        out["items"] = json_schema(node["items"])
    properties = {name: json_schema(sub) for name, sub in (node.get("properties") or {}).items()}
    if node.get("x-kubernetes-embedded-resource"):
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if properties:
        out["properties"] = properties
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        out["additionalProperties"] = json_schema(extra)
    elif extra is not None:
        out["additionalProperties"] = extra
    elif properties and not open_object and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@cache
def _validator() -> jsonschema.protocols.Validator:
    root = dict(openapi_schema())
    properties = dict(root.get("properties") or {})
    properties["status"] = {"x-kubernetes-preserve-unknown-fields": True}  # the apiserver's to check
    root["properties"] = properties
    schema = json_schema(root)
    # ObjectMeta: the CRD may only narrow name; every other field is Kubernetes'.
    schema["properties"]["metadata"] = json_schema(root["properties"]["metadata"], open_object=True)
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _problem(error: jsonschema.ValidationError, hints: Mapping[str, str]) -> SchemaProblem:
    path = ""
    for part in error.absolute_path:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, part)
    # What failed, the schema's value for that keyword and the instance's (jsonschema types them loosely).
    kind: Any = error.validator
    expected: Any = error.validator_value
    value: Any = error.instance
    schema: Any = error.schema
    if kind == "required":
        missing = [name for name in expected if name not in value]
        return SchemaProblem(_join(path, missing[0]), "required")
    if kind == "additionalProperties":
        known = sorted(schema.get("properties") or {})
        unknown = sorted(set(value) - set(known))
        return SchemaProblem(_join(path, unknown[0]), f"unknown field (known: {', '.join(known)})")
    field = path or "(manifest)"
    if kind == "type":
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in _as_list(expected))
        return SchemaProblem(field, f"must be {words}, got {value!r}")
    if kind == "enum":
        return SchemaProblem(field, f"{value!r} is not one of {', '.join(str(v) for v in expected)}")
    if kind == "pattern":
        hint = hints.get(re.sub(r"\[[0-9]+\]", "[]", path))
        return SchemaProblem(field, f"{value!r} is not {hint}" if hint else f"{value!r} does not match {expected}")
    if kind == "minLength":
        return SchemaProblem(field, "required" if value == "" else f"shorter than {expected} characters")
    if kind == "maxLength":
        return SchemaProblem(field, f"longer than {expected} characters")
    if kind == "minimum":
        return SchemaProblem(field, f"must be at least {expected}, got {value}")
    if kind == "maximum":
        return SchemaProblem(field, f"must be at most {expected}, got {value}")
    if kind in ("maxProperties", "maxItems"):
        return SchemaProblem(field, f"at most {expected} entries")
    return SchemaProblem(field, error.message)


def _plain(obj: Any) -> Any:
    """A deep copy made of plain dicts and lists (what JSON Schema's types are checked against),
    whatever mappings and sequences the manifest came in (kopf's bodies, MappingProxyType)."""
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return copy.deepcopy(obj)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
