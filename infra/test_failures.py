"""Prints the tests that failed, from the JUnit reports the test lanes wrote, as the last lines of
a failed `make test`.

The lanes before the e2e stage run at once and their logs come out one after the other; a CI log
keeps only the head and the tail of what was printed, and librdkafka's complaints about a broker
stopped under a client that a failed test still holds can fill that tail. So the names and first
lines of the failures are printed again here, last. Standard library only: it runs where the
Python environment may not have been made.

    python3 infra/test_failures.py .cache/test-reports
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def failures(report: Path) -> list[str]:
    """One line per failed or erroring test case of one JUnit report."""
    lines = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is not None:
                message = (found.get("message") or "").strip().splitlines()
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                lines.append(f"{outcome.upper()} {name}: {message[0] if message else ''}"[:400])
    return lines


def main(folder: str) -> int:
    reports = sorted(Path(folder).glob("*.xml"))
    print(f"test failures, from {len(reports)} lane report(s) in {folder}:")
    for report in reports:
        try:
            lines = failures(report)
        except ET.ParseError as e:  # a lane that died while writing it
            lines = [f"(report unreadable: {e})"]
        for line in lines:
            print(f"  [{report.stem}] {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
