#!/usr/bin/env bash
# Fuzzes what reads untrusted input: gguf_fuzz (the GGUF reader, then the model, its
# weights' GPU repack and the tokenizer built from the file) and tokenizer_fuzz (the
# tokenizer on arbitrary text: the round trip, and no control token from plain text).
# Builds tests/fuzz with clang (libFuzzer + ASan + UBSan on the libraries too) in
# FUZZ_BUILD_DIR (default build-fuzz, CPU only), writes seed files, and runs each
# fuzzer for FUZZ_SECONDS (default 60). Exits non-zero if a fuzzer finds a crash; the
# input that caused it is left in build-fuzz/<fuzzer>-crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (libFuzzer ships with clang)"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# -O1 -g for every library (sanitizer stacks), libFuzzer's coverage everywhere.
CXX=clang++ CC=clang cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DLOWBIT_CUDA=OFF -DLOWBIT_FUZZ=ON -DLOWBIT_SANITIZE=ON -DLOWBIT_BUILD_TESTS=OFF >/dev/null
cmake --build "$build_dir" --target gguf_fuzz tokenizer_fuzz gguf_fuzz_seeds -j "$(nproc)"

fuzz_dir="$build_dir/tests/fuzz"
seeds="$build_dir/gguf-seeds"
mkdir -p "$seeds" "$build_dir/gguf-corpus" "$build_dir/tokenizer-corpus"  # corpora grow across runs
"$fuzz_dir/gguf_fuzz_seeds" "$seeds"

echo "fuzz: the GGUF reader, model and tokenizer from the file, for ${seconds} s"
"$fuzz_dir/gguf_fuzz" "$build_dir/gguf-corpus" "$seeds" -max_total_time="$seconds" -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$build_dir/gguf-crash-"
echo "fuzz: the tokenizer on arbitrary text, for ${seconds} s"
"$fuzz_dir/tokenizer_fuzz" "$build_dir/tokenizer-corpus" -max_total_time="$seconds" -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$build_dir/tokenizer-crash-"
