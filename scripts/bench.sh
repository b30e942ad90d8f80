#!/usr/bin/env bash
# The full kernel benchmarks (longer than scripts/quickstart.sh): installs what is
# missing, builds the `lowbit` command (CUDA when a GPU answers), and runs
# `lowbit bench kvquant` and `lowbit bench gemm` (on the GPU when there is one, else
# their CPU paths); JSON goes to out/. Extra arguments go to bench kvquant.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build-cli.sh
mkdir -p out
"${BUILD_DIR:-build}/bin/lowbit" bench kvquant --json out/kvquant.json "$@"
"${BUILD_DIR:-build}/bin/lowbit" bench gemm --json out/gemm.json
