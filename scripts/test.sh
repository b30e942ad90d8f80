#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (GPU tests skip without a GPU),
# then the Python package's tests and the GGUF reader's fuzz test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
# The CPU library and its tests again, with AddressSanitizer + UBSan (GCC).
bash scripts/sanitize-cpu.sh
# The Python package: built and installed from this tree, then its pytest suite.
bash scripts/python-test.sh
# The fuzz targets (clang, libFuzzer + ASan + UBSan): GGUF files and tokenizer text, for a bounded time each.
bash scripts/setup.sh --fuzz --no-model
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" bash scripts/fuzz.sh
