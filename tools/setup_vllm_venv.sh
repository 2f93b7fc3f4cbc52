#!/usr/bin/env bash
# Create (or refresh) a reference venv with the real vLLM on CPU for tests/vllm and
# bench/vllm_adapter_bench.py, kept out of the project venv:
#   tools/setup_vllm_venv.sh         .venv-vllm      vLLM 0.20.0  (requirements/vllm-ref.txt)
#   tools/setup_vllm_venv.sh 0.33    .venv-vllm-033  vLLM 0.33.0  (requirements/vllm-ref-0.33.txt)
#   tools/setup_vllm_venv.sh 0.34    .venv-vllm-034  vLLM 0.34.0  (requirements/vllm-ref-0.34.txt)
# Idempotent: a stamp keyed on the requirements file's hash skips a venv already current.
#   PY=python3            interpreter to create the venv with
#   VLLM_VENV=DIR         where (relative to the repo root; default by release, as above)
#   VLLM_REQS=FILE        the pinned list (default by release, as above)
#   VLLM_FIND_LINKS=DIR   extra --find-links dir (e.g. one holding an already downloaded
#                         vllm wheel, to skip its download: 0.20.0 ~245 MB, 0.33.0 ~336 MB,
#                         0.34.0 ~340 MB)
# Everything is installed --no-deps from the pinned list, torch==2.13.0 (the local CPU wheel)
# first: pip never resolves, so it never swaps torch for another (multi-GB) build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RELEASE="${1:-0.20}"
case "$RELEASE" in
  0.20) DEFAULT_REQS=requirements/vllm-ref.txt; DEFAULT_VENV=.venv-vllm ;;
  *) DEFAULT_REQS="requirements/vllm-ref-$RELEASE.txt"; DEFAULT_VENV=".venv-vllm-${RELEASE//./}" ;;
esac
REQS="$ROOT/${VLLM_REQS:-$DEFAULT_REQS}"
VENV="$ROOT/${VLLM_VENV:-$DEFAULT_VENV}"
PY="${PY:-python3}"
STAMP="$VENV/.installed"
test -f "$REQS" || { echo "no pinned list $REQS for vLLM $RELEASE" >&2; exit 2; }
HASH="$(sha256sum "$REQS" | cut -d' ' -f1)"
VERSION="$(sed -n 's/^vllm==//p' "$REQS")"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ]; then
  exit 0
fi

echo "setting up $VENV (vLLM $VERSION on CPU; first time takes a few minutes)"
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps)
if [ -n "${VLLM_FIND_LINKS:-}" ]; then
  PIP+=(--find-links "$VLLM_FIND_LINKS")
fi
"${PIP[@]}" "$(grep -E '^torch==' "$REQS")"
"${PIP[@]}" -r "$REQS"
VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" -c "
import importlib.metadata, sys
import vllm.v1.core.sched.async_scheduler, vllm.v1.core.sched.scheduler, websockets
sys.exit(importlib.metadata.version('vllm') != '$VERSION')" >/dev/null 2>&1 \
  || { echo "$VENV: vLLM $VERSION's scheduler does not import" >&2; exit 1; }
echo "$HASH" > "$STAMP"
