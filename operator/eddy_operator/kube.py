"""The operator's only door to the apiserver: apply, scale, delete, patch status (docs/DESIGN.md,
"The operator's part").

Synchronous calls through the official client (the handlers run them in a thread). Everything
the operator writes goes through server-side apply with one field manager, so re-applying the
same objects is a no-op and fields other writers own (the driver's runtime-state data, Spark's
labels) are left alone.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from eddy_contract.kube import api_client as kube_client
from eddy_contract.spec import GROUP, PLURAL, VERSION

FIELD_MANAGER = "eddy-operator"
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)

log = logging.getLogger(__name__)


class Kube:
    """Typed helpers over one ApiClient; safe to share between threads."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api = api_client or kube_client()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.storage = client.StorageV1Api(self.api)
        self._dynamic: DynamicClient | None = None
        self._dynamic_lock = threading.Lock()

    @property
    def dynamic(self) -> DynamicClient:
        with self._dynamic_lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self.api)
            return self._dynamic

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply (forced: the operator is the owner of what it builds)."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        result = self.dynamic.server_side_apply(
            resource,
            body=dict(obj),
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        applied: dict[str, Any] = result.to_dict()
        return applied

    def create_if_missing(self, obj: Mapping[str, Any]) -> bool:
        """Create unless it exists (for objects another writer fills in, like the runtime state)."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            self.dynamic.create(
                resource, body=dict(obj), namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER
            )
            return True
        except ApiException as err:
            if err.status == 409:
                return False
            raise

    def default_storage_class(self) -> str | None:
        for sc in self.storage.list_storage_class().items:
            meta = sc.metadata
            assert meta is not None
            if any((meta.annotations or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
                return str(meta.name)
        return None

    def scale_statefulset(self, namespace: str, name: str, replicas: int, only_up: bool = False) -> bool:
        """Set replicas on a StatefulSet if it exists; False when it does not (yet). `only_up`: never
        lower them (a scale-in is the orchestrator's, once the leaving executors hold nothing)."""
        try:
            if only_up:
                current = self.apps.read_namespaced_stateful_set_scale(name, namespace).spec.replicas or 0
                if current >= replicas:
                    return True
            self.apps.patch_namespaced_stateful_set_scale(name, namespace, {"spec": {"replicas": replicas}})
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def delete_claims(self, namespace: str, label_selector: str) -> list[str]:
        claims = self.core.list_namespaced_persistent_volume_claim(namespace, label_selector=label_selector).items
        names = [str(c.metadata.name) for c in claims if c.metadata is not None]
        for name in names:
            try:
                self.core.delete_namespaced_persistent_volume_claim(name, namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
        return names

    def scale_streamapp(self, namespace: str, name: str, replicas: int) -> None:
        """`kubectl scale sapp`: spec.executors.replicas through the StreamApp's scale subresource."""
        self.custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, name,
                                                         {"spec": {"replicas": replicas}})

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status)}
            )
        except ApiException as err:
            if err.status != 404:  # the app is being deleted
                raise

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One value of a Secret (None if the Secret or the key is missing)."""
        try:
            data = self.core.read_namespaced_secret(name, namespace).data or {}
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        value = data.get(key)
        return base64.b64decode(value).decode() if value is not None else None

    def delete_pod(self, namespace: str, name: str, uid: str | None, grace_period_s: int | None = None) -> bool:
        """Delete the pod `name` if it is still the one of `uid` (`grace_period_s`: instead of the
        pod's own); False if it is gone already or another pod holds its name (a StatefulSet made it
        again)."""
        try:
            self.core.delete_namespaced_pod(name, namespace, body=client.V1DeleteOptions(
                grace_period_seconds=grace_period_s, preconditions=client.V1Preconditions(uid=uid)))
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise
        return True

    def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        try:
            self.core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": dict(labels)}})
        except ApiException as err:
            if err.status != 404:
                raise

