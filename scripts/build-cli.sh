#!/usr/bin/env bash
# Builds only the `lowbit` command into BUILD_DIR (default: build), tests off: with
# CUDA when this machine has a GPU that answers (nvidia-smi) and nvcc, else CPU-only
# (the CPU build takes a few minutes on 2 cores; all CUDA kernels take much longer).
# LOWBIT_CUDA=ON|OFF overrides the choice; extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cuda="${LOWBIT_CUDA:-}"
if [ -z "$cuda" ]; then
  cuda=OFF
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    if command -v nvcc >/dev/null; then cuda=ON; else echo "build-cli: a GPU but no nvcc: building for the CPU"; fi
  fi
fi
echo "build-cli: LOWBIT_CUDA=$cuda, tests off, target lowbit -> $build_dir/bin/lowbit"
mkdir -p "$build_dir"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLOWBIT_CUDA="$cuda" -DLOWBIT_BUILD_TESTS=OFF -DLOWBIT_FUZZ=OFF "$@" \
  >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
cmake --build "$build_dir" --target lowbit_cli -j "$(nproc)"
