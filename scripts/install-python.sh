#!/usr/bin/env bash
# Creates the Python workspace (.venv) with uv: the API, the runner and the dev tools.
set -euo pipefail
if ! command -v uv >/dev/null 2>&1; then
  echo "python: installing uv (pip --user)"
  python3 -m pip install --quiet --user uv
  export PATH="$HOME/.local/bin:$PATH"
fi
echo "python: syncing .venv with uv ($(uv --version))"
uv sync --all-packages --quiet
echo "python: ready ($(.venv/bin/python --version))"
