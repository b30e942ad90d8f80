#!/usr/bin/env bash
# Builds the CPU library and its tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (GCC, -O1 -g, LOWBIT_SANITIZE=ON) in SANITIZE_BUILD_DIR (default build-sanitize) and runs
# the CPU tests once, in one process: the first report (out-of-bounds access, use after
# free, leak, signed overflow, bad shift, misaligned or null access...) fails the run with
# its stack. Extra arguments go to the test binary (e.g. --gtest_filter=Tokenizer*).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${SANITIZE_BUILD_DIR:-build-sanitize}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DLOWBIT_CUDA=OFF -DLOWBIT_SANITIZE=ON -DLOWBIT_FUZZ=OFF >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target lowbit_cpu_tests
echo "sanitize-cpu: running the CPU tests under ASan + UBSan"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}" \
UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  "$build_dir/tests/lowbit_cpu_tests" --gtest_brief=1 "$@"
