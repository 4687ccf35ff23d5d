#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and the CUDA toolkit (nvcc):
#   bash scripts/gpu_check.sh
# Builds a separate virtualenv (.venv-gpu) with llama-cpp-python compiled for CUDA and
# faiss-gpu in place of faiss-cpu, then runs the tests marked `gpu` (tests/test_gpu.py:
# FAISS's GPU copy of the index, every layer offloaded) and the engine's real-model tests
# with every layer on the GPU. Nothing here runs on the development machines (no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
VENV=.venv-gpu
LLAMA_VERSION=$(sed -n 's/.*"llama-cpp-python\([^"]*\)".*/\1/p' pyproject.toml)

python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet -e '.[dev]'
"$VENV/bin/pip" uninstall --yes --quiet faiss-cpu
"$VENV/bin/pip" install --quiet -e '.[gpu]'
CMAKE_ARGS="-DGGML_CUDA=on" "$VENV/bin/pip" install --quiet --force-reinstall --no-cache-dir \
  --no-deps "llama-cpp-python${LLAMA_VERSION}"
"$VENV/bin/ragdesk" prepare

"$VENV/bin/python" - <<'PY'
import faiss, llama_cpp
print("faiss GPUs:", faiss.get_num_gpus(), "| llama.cpp GPU offload:", llama_cpp.llama_supports_gpu_offload())
PY
"$VENV/bin/pytest" -m gpu -v -rs tests/test_gpu.py
# The real-model API tests again with every layer offloaded: Settings read
# RAGDESK_N_GPU_LAYERS from the environment, and the servers the tests start inherit it.
RAGDESK_N_GPU_LAYERS=-1 "$VENV/bin/pytest" -q tests/test_openai_real.py tests/test_end_to_end.py
