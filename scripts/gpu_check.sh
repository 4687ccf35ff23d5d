#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and the CUDA toolkit (nvcc):
#   bash scripts/gpu_check.sh
# Builds a separate virtualenv (.venv-gpu) with llama-cpp-python compiled for CUDA and
# faiss-gpu in place of faiss-cpu, then runs the tests marked `gpu` (tests/test_gpu.py:
# FAISS's GPU copy of the index, every layer offloaded) and the engine's real-model tests
# with every layer on the GPU. Nothing here runs on the development machines (no GPU).
# It needs the package index (pip) and the CUDA toolkit; the first run compiles llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv
VENV=.venv-gpu
LLAMA_VERSION=$(sed -n 's/.*"llama-cpp-python\([^"]*\)".*/\1/p' pyproject.toml)

python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet -e '.[dev]'
# faiss-gpu and faiss-cpu install the same `faiss` package: only one may be present, and
# the project's dependencies would pull faiss-cpu back, hence --no-deps.
"$VENV/bin/pip" uninstall --yes --quiet faiss-cpu
"$VENV/bin/pip" install --quiet --no-deps "faiss-gpu>=1.15,<2"
CMAKE_ARGS="-DGGML_CUDA=on" "$VENV/bin/pip" install --quiet --force-reinstall --no-cache-dir \
  --no-deps --no-binary llama-cpp-python "llama-cpp-python${LLAMA_VERSION}"
"$VENV/bin/ragdesk" prepare

# Skipped GPU tests would look like a pass: refuse to go on without both GPU builds.
"$VENV/bin/python" - <<'PY'
import faiss, llama_cpp
gpus, offload = faiss.get_num_gpus(), llama_cpp.llama_supports_gpu_offload()
print("faiss GPUs:", gpus, "| llama.cpp GPU offload:", offload)
if not gpus or not offload:
    raise SystemExit("the GPU builds are not in place: see the output above")
PY
"$VENV/bin/pytest" -m gpu -v -rs tests/test_gpu.py
# The real-model API tests again with every layer offloaded: Settings read
# RAGDESK_N_GPU_LAYERS from the environment, and the servers the tests start inherit it.
RAGDESK_N_GPU_LAYERS=-1 "$VENV/bin/pytest" -q tests/test_openai_real.py tests/test_end_to_end.py
