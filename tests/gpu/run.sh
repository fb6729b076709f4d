#!/usr/bin/env bash
# The CUDA backend's GPU checks in one run (bench/gpu.py): op cases vs the reference interpreter, ResNet-18,
# BERT-base and GPT-2 vs PyTorch CUDA, then latency vs PyTorch eager and torch.compile (with and without CUDA
# Graphs). From the repository root on a machine with an NVIDIA GPU:   tests/gpu/run.sh [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUVIL_CACHE_DIR="${CUVIL_CACHE_DIR:-/tmp/cuvil-gpu-cache}"
export CUVIL_CUDA_ARCHS="${CUVIL_CUDA_ARCHS:-sm_90}"  # the H200's cubins only (and PTX): half the compilation
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
exec timeout 570 python3 -m bench.gpu "$@"
