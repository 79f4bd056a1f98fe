"""Reconcile a StreamApp into its objects (idempotent), and clean up after it (docs/DESIGN.md,
"The operator's part": Reconcile).

Called by the create/update/resume/delete handlers. Every object comes from
`eddy_operator.builders` and is server-side applied, so running this twice, or after an
operator restart, changes nothing and creates no duplicates. Executor count changes go straight
to the executor StatefulSet that Spark created (no driver restart); changes that apply in place
(eddy_contract.upgrade's IN_PLACE_FIELDS) reach the running driver through the assignment
ConfigMap; any other spec change changes the driver pod template's config hash and rolls the
driver, which the executors outlive, unless that version was rejected (eddy_operator.upgrades):
then the version it was rolled back to is applied.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eddy_contract.spec import SpecError, StreamAppSpec
from eddy_operator import builders, spark_builders
from eddy_operator.builders import Owner
from eddy_operator.drains import hands_over
from eddy_operator.kube import Kube
from eddy_operator.upgrades import Version, VersionBook

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileResult:
    spec: StreamAppSpec
    storage_class: str
    applied: tuple[str, ...]
    executors_scaled: bool


def resolve_storage_class(kube: Kube, spec: StreamAppSpec) -> str:
    """Spark creates on-demand claims only with an explicit class, so the cluster default is
    looked up when the StreamApp names none."""
    if spec.state.storage_class:
        return spec.state.storage_class
    default = kube.default_storage_class()
    if default is None:
        raise SpecError("spec.state.storageClass", "not set, and the cluster has no default StorageClass")
    return default


def read_versions(kube: Kube, namespace: str, app: str) -> VersionBook:
    """The app's `<app>-versions` ConfigMap (eddy_operator.upgrades), empty if it is not there."""
    from kubernetes.client.exceptions import ApiException

    try:
        cm = kube.core.read_namespaced_config_map(builders.versions_configmap_name(app), namespace)
    except ApiException as err:
        if err.status == 404:
            return VersionBook()
        raise
    return VersionBook.from_data(cm.data)


def write_versions(kube: Kube, spec: StreamAppSpec, owner: Owner, book: VersionBook) -> None:
    kube.apply(builders.build_versions_configmap(spec, owner, book.to_data()))


def reconcile(kube: Kube, body: Mapping[str, Any]) -> ReconcileResult:
    spec = StreamAppSpec.from_manifest(body)
    owner = Owner(spec.name, body["metadata"]["uid"])
    storage_class = resolve_storage_class(kube, spec)
    applied: list[str] = []
    if kube.create_if_missing(builders.build_push_token_secret(spec, owner, secrets.token_urlsafe(24))):
        applied.append(f"Secret/{builders.push_token_secret_name(spec.name)}")
    # The version to run: the wanted one, or the healthy one it was rolled back to (eddy_operator.upgrades).
    wanted = Version(spark_builders.config_hash(spec, storage_class, body["spec"]), dict(body["spec"]))
    book = read_versions(kube, spec.namespace, spec.name).with_wanted(wanted)
    write_versions(kube, spec, owner, book)
    version = book.to_apply() or wanted
    run_spec, run_manifest = spec, body["spec"]
    if version.hash != wanted.hash:
        log.info("%s/%s: version %s was rejected (%s); running %s", spec.namespace, spec.name, wanted.hash,
                 book.rejected[wanted.hash].reason, version.hash)
        run_manifest = version.spec
        run_spec = StreamAppSpec.from_manifest({**body, "spec": run_manifest})
    for obj in spark_builders.build_all(run_spec, owner, storage_class, run_manifest, hands_over()):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].endswith("-runtime-state"):
            # The driver owns its content; the operator only makes sure it exists and is owned.
            kube.create_if_missing(obj)
        else:
            kube.apply(obj)
        applied.append(name)
    # Up at once; down by the orchestrator, once the executors that go hold nothing (scale_in).
    scaled = kube.scale_statefulset(
        spec.namespace, builders.executor_statefulset_name(spec.name), spec.executors.replicas, only_up=True
    )
    log.info("reconciled %s/%s: %s", spec.namespace, spec.name, ", ".join(applied))
    return ReconcileResult(spec, storage_class, tuple(applied), scaled)


def clean_up(kube: Kube, body: Mapping[str, Any]) -> list[str]:
    """On delete: owned objects go with the garbage collector; the state claims (owned by no
    one, see builders) are deleted only when the app asks for it. Returns the deleted claims."""
    app = body["metadata"]["name"]
    namespace = body["metadata"]["namespace"]
    retain = ((body.get("spec") or {}).get("state") or {}).get("retainVolumesOnDelete", True)
    if retain:
        return []
    selector = builders.label_selector_string(builders.executor_selector(app))
    deleted = kube.delete_claims(namespace, selector)
    log.info("deleted state claims of %s/%s: %s", namespace, app, deleted)
    return deleted
