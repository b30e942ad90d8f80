#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GPU tests skip without a GPU),
# then the Python package's tests and the GGUF reader's fuzz test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
# The Python package: built and installed from this tree, then its pytest suite.
bash scripts/python-test.sh
# The GGUF reader's fuzz target (clang, libFuzzer + ASan + UBSan), for a bounded time.
bash scripts/setup.sh --fuzz --no-model
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" bash scripts/fuzz-gguf.sh
