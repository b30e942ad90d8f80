#!/usr/bin/env bash
# The first command: what lowbit is for, on this machine, in about five minutes from
# a fresh clone (downloads included). It installs what is missing (compiler, CMake,
# PCRE2, the 98 MB default model), builds only the `lowbit` command (CPU-only unless a
# GPU answers), then shows:
#   - the KV-cache policies on the default model: memory, decode speed, perplexity on a
#     short slice of WikiText-2, and the memory plot (out/quickstart/kvcache-memory.png)
#   - the engine's tokens/s as llama-bench measures them (prompt and generation)
#   - on a GPU, a short kernel summary against the peers measured in the same run
# Tables and JSON go to out/quickstart/. The README's "Reading the results" explains
# every column. The tests have their own command (scripts/test.sh); the full kernel
# benchmarks theirs (scripts/bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
out=out/quickstart
mkdir -p "$out"
stage() { echo; echo "=== [$((SECONDS - start)) s] $*"; }

stage "installing what is missing (compiler, CMake, PCRE2, the default model)"
bash scripts/setup.sh
stage "building the lowbit command"
bash scripts/build-cli.sh
lowbit="${BUILD_DIR:-build}/bin/lowbit"
"$lowbit" --version
gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && "$lowbit" --version | grep -q CUDA; then gpu=1; fi

stage "KV-cache policies on the default model (writes $out/kvcache.md, .json, kvcache-memory.png)"
if [ "$gpu" = 1 ]; then  # the GPU has time for the full slices
  kv_args=(--context 512 --max-windows 8 --max-new-tokens 200 --speed-prompt 2048 --speed-new-tokens 256)
else
  kv_args=(--context 256 --max-windows 4 --max-new-tokens 64 --speed-prompt 256 --speed-new-tokens 64)
fi
"$lowbit" eval kvcache "${kv_args[@]}" --speed-repeats 3 --png "$out/kvcache-memory.png" \
  --json "$out/kvcache.json" | tee "$out/kvcache.md"

stage "engine speed, as llama-bench measures it (writes $out/speed.md, .json)"
"$lowbit" bench speed --repetitions 3 --json "$out/speed.json" | tee "$out/speed.md"

if [ "$gpu" = 1 ]; then
  stage "kernel summary against the peers in the same run (writes $out/kernels-*.md)"
  "$lowbit" bench gemm --quick --section weight_only --max-m 16 --json "$out/kernels-gemm.json" |
    tee "$out/kernels-gemm.md"
  "$lowbit" bench kvquant --case llm_medium --no-matrix --json "$out/kernels-kvquant.json" |
    tee "$out/kernels-kvquant.md"
fi
stage "done: tables in $out/, the memory plot in $out/kvcache-memory.png; next: README.md, 'Reading the results'"
