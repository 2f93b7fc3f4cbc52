#!/usr/bin/env bash
# Create (or refresh) .venv-vllm: the real vLLM 0.20.0 on CPU for tests/vllm and
# bench/vllm_adapter_bench.py, kept out of the project venv (see requirements/vllm-ref.txt).
# Idempotent: a stamp keyed on the requirements file's hash skips a venv already current.
#   PY=python3            interpreter to create the venv with
#   VLLM_VENV=.venv-vllm  where (relative to the repo root)
#   VLLM_FIND_LINKS=DIR   extra --find-links dir (e.g. one holding an already downloaded
#                         vllm-0.20.0 wheel, to skip its ~245 MB download)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQS="$ROOT/requirements/vllm-ref.txt"
VENV="$ROOT/${VLLM_VENV:-.venv-vllm}"
PY="${PY:-python3}"
STAMP="$VENV/.installed"
HASH="$(sha256sum "$REQS" | cut -d' ' -f1)"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ]; then
  exit 0
fi

echo "setting up $VENV (vLLM 0.20.0 on CPU; first time takes a few minutes)"
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
EXTRA=()
if [ -n "${VLLM_FIND_LINKS:-}" ]; then
  EXTRA=(--find-links "$VLLM_FIND_LINKS")
fi
"$VENV/bin/python" -m pip install -q --no-deps "${EXTRA[@]}" -r "$REQS"
VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" -c "import vllm.v1.core.sched.scheduler, websockets" \
  >/dev/null 2>&1 \
  || { echo "$VENV: vLLM's scheduler does not import" >&2; exit 1; }
echo "$HASH" > "$STAMP"
