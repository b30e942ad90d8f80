#!/usr/bin/env bash
# Fuzzes the GGUF reader: builds tests/fuzz with clang (libFuzzer + ASan + UBSan) in
# build-fuzz (CPU only), writes seed files, and runs the fuzzer for FUZZ_SECONDS
# (default 60). Exits non-zero if the fuzzer finds a crash; the input that caused it
# is left in build-fuzz/gguf-crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"

command -v clang++ >/dev/null || { echo "fuzz-gguf: clang++ not found (libFuzzer ships with clang)"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CXX=clang++ CC=clang cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLOWBIT_CUDA=OFF -DLOWBIT_FUZZ=ON -DLOWBIT_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" --target gguf_fuzz gguf_fuzz_seeds -j "$(nproc)"

fuzz_dir="$build_dir/tests/fuzz"
seeds="$build_dir/gguf-seeds"
corpus="$build_dir/gguf-corpus"  # grows across runs; new inputs go here
mkdir -p "$seeds" "$corpus"
"$fuzz_dir/gguf_fuzz_seeds" "$seeds"

echo "fuzz-gguf: fuzzing the GGUF reader for ${seconds} s"
"$fuzz_dir/gguf_fuzz" "$corpus" "$seeds" -max_total_time="$seconds" -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$build_dir/gguf-crash-"
