"""Fixtures of the runtime tests beyond tests/conftest.py's servers."""

from tests.runtime.two_inputs import joined  # noqa: F401 - a fixture: joined(sub) -> TwoInputs
