#!/usr/bin/env bash
# Create .venv (Python >= 3.11) and install the pinned dependencies from requirements.lock,
# then rmq-spark itself in editable mode. Re-runs only when pyproject.toml or the lock change
# (the Makefile's stamp file decides).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

pick_python() {
  for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  if ! py=$(pick_python); then
    echo "error: rmq-spark needs Python 3.11 or newer; none found on PATH (set PYTHON=/path/to/python3.11)." >&2
    exit 1
  fi
  echo "venv: creating $VENV with $($py --version 2>&1)"
  "$py" -m venv "$VENV"
fi
echo "venv: installing pinned dependencies (requirements.lock) ..."
"$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
"$VENV/bin/python" -m pip install -q -r requirements.lock
# compat: the checkout goes on sys.path, where Spark's look-up of Python data sources
# (pkgutil.iter_modules) finds pyspark_rocketmq; the default editable finder hides it.
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e . \
  --config-settings editable_mode=compat
echo "venv: ready ($("$VENV/bin/python" --version))"
