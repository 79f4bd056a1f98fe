"""A restarted driver adopts the running executor pods as its StatefulSet's new revision only when
the pod template is the same but for the driver it names (eddy_runtime.driver.executor_set)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eddy_runtime.driver.executor_set import same_template

pytestmark = pytest.mark.unit


def template(driver_uid: str, image: str = "eddy:0.1.0") -> dict[str, Any]:
    return {
        "metadata": {"name": "wordcount-exec-EXECID", "labels": {"spark-role": "executor"},
                     "ownerReferences": [{"kind": "Pod", "name": "wordcount-driver-0", "uid": driver_uid}]},
        "spec": {"containers": [{"name": "executor", "image": image, "env": [{"name": "SPARK_EXECUTOR_CORES",
                                                                               "value": "1"}]}]},
    }


def test_a_new_driver_s_template_is_the_same_revision_but_for_the_driver_it_names() -> None:
    assert same_template(template("uid-1"), template("uid-2"))


def test_a_changed_image_or_setting_is_a_new_revision_that_rolls_the_pods() -> None:
    assert not same_template(template("uid-1"), template("uid-2", image="eddy:0.2.0"))
    changed = copy.deepcopy(template("uid-2"))
    changed["spec"]["containers"][0]["env"][0]["value"] = "2"
    assert not same_template(template("uid-1"), changed)


def test_nothing_to_adopt_without_an_earlier_template() -> None:
    assert not same_template(None, template("uid-2"))
