#!/usr/bin/env bash
# Configures and builds lowbit into BUILD_DIR (default: build), the tests included.
# CUDA is used when nvcc is found (a GPU is not needed to compile); extra arguments go
# to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cuda=ON
command -v nvcc >/dev/null || { cuda=OFF; echo "build: nvcc not found, building the CPU parts only"; }
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLOWBIT_CUDA="$cuda" -DLOWBIT_BUILD_TESTS=ON "$@"
cmake --build "$build_dir" -j "$(nproc)"
