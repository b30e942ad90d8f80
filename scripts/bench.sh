#!/usr/bin/env bash
# Installs what is missing, builds, and runs the benchmark suite: on the GPU when
# there is one, otherwise the CPU paths on the cases that fit this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p out
"${BUILD_DIR:-build}/bin/lowbit" bench kvquant --json out/kvquant.json "$@"
"${BUILD_DIR:-build}/bin/lowbit" bench gemm --json out/gemm.json
