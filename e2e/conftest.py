"""Fixtures for the end-to-end tests: the session's real servers, re-exported from the test
suite's root conftest (pytest loads `tests/conftest.py` only for tests under `tests/`)."""

from __future__ import annotations

import pytest

from tests.conftest import kafka, kube, namespace, servers_dir  # noqa: F401 - fixtures, used by name
from tests.operator.cluster import install_crd
from tests.servers import ControlPlane


@pytest.fixture(scope="session")
def crd(kube: ControlPlane) -> ControlPlane:  # noqa: F811 - `kube` is the fixture imported above
    """The control plane with the StreamApp CRD and a default StorageClass installed."""
    install_crd(kube)
    return kube
