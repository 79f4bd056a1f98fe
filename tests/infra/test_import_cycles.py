"""infra/lint/import_cycles.py finds import circles, wherever the import sits, and layering breaches."""

from __future__ import annotations

import importlib.util
import io
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", REPO / "infra" / "lint" / "import_cycles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_cycles"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


ic = _load()


def _check(root: Path, files: dict[str, str]) -> tuple[int, str]:
    """Write the files under ``root``, check the packages they make; the exit status and output."""
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
    packages = sorted({root / name.split("/")[0] for name in files})
    out = io.StringIO()
    rc = ic.check(packages, out=out, relative_to=root)
    return rc, out.getvalue()


CIRCLES = {
    "function-level import": (
        {
            "eddy_runtime/__init__.py": "",
            "eddy_runtime/a.py": "from eddy_runtime import b\n",
            "eddy_runtime/b.py": "import os\n\ndef f():\n    from eddy_runtime.a import g\n    return g\n",
            "eddy_runtime/c.py": "from eddy_runtime.a import x\n",  # imports a, but nothing imports c back
        },
        ["import circle 1 (2 modules): eddy_runtime.a, eddy_runtime.b",
         "eddy_runtime/a.py:1: eddy_runtime.a -> eddy_runtime.b",
         "eddy_runtime/b.py:4: eddy_runtime.b -> eddy_runtime.a"],
    ),
    "import under TYPE_CHECKING": (
        {
            "eddy_contract/__init__.py": "",
            "eddy_contract/spec.py": "from eddy_contract.tasks import TaskId\n",
            "eddy_contract/tasks.py": "import typing\nif typing.TYPE_CHECKING:\n    from .spec import Spec\n",
        },
        ["import circle 1 (2 modules): eddy_contract.spec, eddy_contract.tasks",
         "eddy_contract/tasks.py:3: eddy_contract.tasks -> eddy_contract.spec"],
    ),
    "a package's __init__": (
        {
            "eddy_runtime/__init__.py": "",
            "eddy_runtime/state/__init__.py": "from .store import Store\n",
            "eddy_runtime/state/store.py": "from eddy_runtime.state import codec_name\n",
        },
        ["import circle 1 (2 modules): eddy_runtime.state, eddy_runtime.state.store",
         "eddy_runtime/state/store.py:1: eddy_runtime.state.store -> eddy_runtime.state"],
    ),
}


@pytest.mark.parametrize("case", list(CIRCLES))
def test_a_circle_is_found_with_the_lines_of_its_imports(tmp_path: Path, case: str) -> None:
    files, expected = CIRCLES[case]
    rc, out = _check(tmp_path, files)
    assert rc == 1, out
    for line in expected:
        assert line in out, out
    assert "import circle 2" not in out and "eddy_runtime.c" not in out, out


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    rc, out = _check(tmp_path, {
        "eddy_contract/__init__.py": "",
        "eddy_contract/tasks.py": "import re\n",
        "eddy_contract/spec.py": "from eddy_contract import tasks\nfrom . import tasks as t\n",
        "eddy_runtime/__init__.py": "",
        "eddy_runtime/driver.py": "from eddy_contract.spec import Spec\nfrom eddy_runtime import local\n",
        "eddy_runtime/local.py": "from eddy_contract.tasks import TaskId\n",
        "eddy_operator/__init__.py": "",
        "eddy_operator/main.py": "def run():\n    from eddy_contract.spec import Spec\n",
    })
    assert rc == 0, out
    assert out == "no import circles, layering kept (8 modules)\n"


def test_layering_breaches_are_found(tmp_path: Path) -> None:
    rc, out = _check(tmp_path, {
        "eddy_contract/__init__.py": "",
        "eddy_contract/spec.py": "def f():\n    import eddy_runtime.driver\n",
        "eddy_runtime/__init__.py": "",
        "eddy_runtime/driver.py": "from eddy_operator.status import x\n",
        "eddy_operator/__init__.py": "",
        "eddy_operator/status.py": "",
    })
    assert rc == 1
    assert ("layering: eddy_contract/spec.py:2: eddy_contract.spec -> eddy_runtime.driver  "
            "(eddy_contract must not import eddy_runtime)") in out, out
    assert ("layering: eddy_runtime/driver.py:1: eddy_runtime.driver -> eddy_operator.status  "
            "(eddy_runtime must not import eddy_operator)") in out, out
    assert "0 import circle(s), 2 layering breach(es)" in out, out


def test_a_breach_is_found_even_when_the_other_package_is_not_scanned(tmp_path: Path) -> None:
    rc, out = _check(tmp_path, {"eddy_operator/__init__.py": "",
                                "eddy_operator/builders.py": "import eddy_runtime.local\n"})
    assert rc == 1
    assert "eddy_operator.builders -> eddy_runtime.local" in out, out


def test_main_refuses_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ic.main([str(tmp_path / "nowhere")]) == 2
    assert "not a directory" in capsys.readouterr().err


RUNTIME_LAYERS = {
    "eddy_runtime/__init__.py": "",
    "eddy_runtime/cli.py": "from eddy_runtime.driver.loop import Driver\n",
    "eddy_runtime/kafka/__init__.py": "",
    "eddy_runtime/kafka/client.py": "",
    "eddy_runtime/state/__init__.py": "",
    "eddy_runtime/state/store.py": "from eddy_runtime.kafka.client import KafkaClientConfig\n",
    "eddy_runtime/protocol/__init__.py": "",
    "eddy_runtime/protocol/work.py": "from eddy_runtime.state.store import Store\n",
    "eddy_runtime/executor/__init__.py": "",
    "eddy_runtime/executor/runner.py": "from eddy_runtime.protocol.work import WorkItem\n",
    "eddy_runtime/driver/__init__.py": "",
    "eddy_runtime/driver/loop.py": "from eddy_runtime.protocol import work\n",
}


def test_sub_packages_that_keep_their_layers_pass(tmp_path: Path) -> None:
    rc, out = _check(tmp_path, RUNTIME_LAYERS)
    assert rc == 0, out


@pytest.mark.parametrize(("planted", "rule"), [
    ({"eddy_runtime/driver/loop.py": "def f():\n    from eddy_runtime.executor import runner\n"},
     "eddy_runtime/driver/loop.py:2: eddy_runtime.driver.loop -> eddy_runtime.executor.runner  "
     "(eddy_runtime.driver must not import eddy_runtime.executor)"),
    ({"eddy_runtime/executor/runner.py": "import eddy_runtime.driver.loop\n"},
     "(eddy_runtime.executor must not import eddy_runtime.driver)"),
    ({"eddy_runtime/state/store.py": "from eddy_runtime.protocol.work import WorkItem\n"},
     "eddy_runtime.state.store -> eddy_runtime.protocol.work  (eddy_runtime.state must not import "
     "eddy_runtime.protocol)"),
    ({"eddy_runtime/kafka/client.py": "from eddy_runtime import cli\n"},
     "(eddy_runtime.kafka must not import eddy_runtime.cli, a module of the top)"),
    ({"eddy_runtime/helpers/__init__.py": "", "eddy_runtime/helpers/x.py": "from eddy_runtime.kafka import client\n"},
     "(eddy_runtime.helpers is not in the layering table)"),
])
def test_a_sub_package_import_against_the_layers_fails_lint(tmp_path: Path, planted: dict[str, str],
                                                             rule: str) -> None:
    rc, out = _check(tmp_path, {**RUNTIME_LAYERS, **planted})
    assert rc == 1, out
    assert rule in out, out


def test_the_repository_keeps_its_layers() -> None:
    out = io.StringIO()
    rc = ic.check([REPO / p for p in ic.DEFAULT_PACKAGES], out=out, relative_to=REPO)
    assert rc == 0, out.getvalue()
