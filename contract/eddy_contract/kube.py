"""The one way both halves get a Kubernetes API client: in-cluster credentials in a pod, otherwise
$KUBECONFIG (tests, laptops, `eddy run` against a cluster); docs/DESIGN.md, "Components and folders"."""

from __future__ import annotations

import os

from kubernetes import client, config


def api_client() -> client.ApiClient:
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
        return client.ApiClient()
    return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
