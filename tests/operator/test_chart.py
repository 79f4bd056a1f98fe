"""The Helm chart: its CRD is the repository's, and it lints, validates and installs."""

from __future__ import annotations

import pytest

from tests.operator.manifests import CRD_PATH, REPO

CHART = REPO / "charts" / "eddy-operator"


@pytest.mark.unit
def test_chart_crd_is_an_exact_copy_of_crds_streamapp():
    copy = CHART / "crds" / "streamapp.yaml"
    assert copy.read_bytes() == CRD_PATH.read_bytes(), (
        "charts/eddy-operator/crds/streamapp.yaml differs from crds/streamapp.yaml: "
        "run `cp crds/streamapp.yaml charts/eddy-operator/crds/`"
    )
