#!/usr/bin/env bash
# Creates or refreshes the project's Python environment in .venv (Python 3.11), installing
# the project with its dev tools. A stamp of pyproject.toml's hash makes a second run instant;
# pip's own cache (~/.cache/pip) makes a fresh clone on the same machine fast.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${EDDY_VENV:-$repo/.venv}
python=${PYTHON:-python3.11}
stamp=$venv/.eddy-stamp
want=$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
command -v "$python" >/dev/null || { echo "python-env: $python not found (Eddy needs Python 3.11)" >&2; exit 1; }
command -v java >/dev/null || { echo "python-env: java not found (Spark and Kafka need a Java 17 runtime)" >&2; exit 1; }
echo "python-env: installing the project into $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -e "$repo[dev]"
echo "$want" > "$stamp"
