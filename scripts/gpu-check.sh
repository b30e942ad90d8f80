#!/usr/bin/env bash
# One command for a GPU machine (H100, CUDA 13, no network): Release build for
# sm_90a with all cores, every test (GPU ones included), the benchmarks; logs and
# JSON go to RESULTS_DIR (default out/gpu-check); a short summary prints last.
#   usage: scripts/gpu-check.sh [--sanitize] [RESULTS_DIR]
# --sanitize: after the build, instead of the tests and benchmarks, the GPU tests under
# compute-sanitizer, one process per test, GPU_CHECK_SANITIZE_JOBS at a time (default
# half the cores; a crash or hang in one leaves the others checked): memcheck (with the
# leak check) over every suite, then racecheck and synccheck over the suites whose
# kernels use shared memory or barriers, without the large-shape tests (racecheck slows
# shared-memory-heavy kernels 100x and more; their kernels run in the other tests of the
# suite at small shapes; the tests that sweep many shapes take a subset that launches the
# same kernels, LOWBIT_TEST_SANITIZER). Each test's report is in RESULTS_DIR/sanitize/<tool>-<test>.log;
# a line per suite and tool prints at the end.
# GPU_CHECK_SANITIZE_TOOLS="memcheck" (default "memcheck racecheck synccheck") picks the
# tools, GPU_CHECK_SANITIZE_SUITES="IntGemmGpu KvCacheGpu" the suites (default: all for
# memcheck, the shared-memory list for the others), GPU_CHECK_SANITIZE_TIMEOUT the seconds
# a test may take under one tool (default 900; a timeout is reported, not hidden).
# GPU_CHECK_SANITIZE_TESTS (a bash regex over Suite.Test names) narrows the chosen suites'
# tests further, e.g. to rerun the ones a previous run did not finish.
# On the offline GPU machine, carry .wheels (scripts/python-wheels.sh; gguf for the HF
# default-model test included) and .deps (scripts/offline-deps.sh), both made where
# there is network.
# The commit recorded in the results is $LOWBIT_COMMIT, else the one the binaries were
# built from (cmake/build_info.cmake: git in this tree, "+dirty" past it). On a machine
# whose copy of .git is stale, set LOWBIT_COMMIT to the commit the tree is.
# For a partial run (a short lease): GPU_CHECK_TESTS=<ctest -R regex> runs only the
# matching tests, GPU_CHECK_BENCH="gemm" (default "kvquant gemm attention flash kvcache") only
# those benchmarks (also kv-attention, prefill, kv-batch, decode-8b, batch-8b, batch-8b-pdl, serve-8b; set and
# empty: none), GPU_CHECK_PYTHON=0 skips the Python package's tests,
# GPU_CHECK_TARGETS="lowbit_gpu_tests lowbit_cli" builds only those targets (and then
# runs only the tests labelled gpu: the CPU suites are not built).
set -uo pipefail
cd "$(dirname "$0")/.."
sanitize_mode=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize_mode=1
  shift
fi
results="${1:-out/gpu-check}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
build_dir="${BUILD_DIR:-build-gpu}"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

nvidia-smi >"$results/nvidia-smi.txt" 2>&1 || echo "gpu-check: nvidia-smi failed" >&2

# An offline machine without PCRE2's headers: the packages carried in .deps/debs
# (scripts/offline-deps.sh, run where there is network), unpacked beside the tree.
if { [ ! -f /usr/include/pcre2.h ] || [ ! -f /usr/include/httplib.h ] || [ ! -f /usr/include/nlohmann/json.hpp ]; } &&
  ls .deps/debs/*.deb >/dev/null 2>&1; then
  deps_root="$(bash scripts/offline-deps.sh unpack)"
  export CMAKE_PREFIX_PATH="$deps_root${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # The CLI links cpp-httplib's shared library (lowbit serve): found there at run time.
  export LD_LIBRARY_PATH="$deps_root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: PCRE2 / cpp-httplib / nlohmann-json from .deps ($deps_root)"
fi

step() {  # step NAME LOGFILE COMMAND...: runs, tees, records the status
  local name="$1" log="$2"
  shift 2
  echo "=== $name"
  local start=$SECONDS
  "$@" 2>&1 | tee "$results/$log"
  local status=${PIPESTATUS[0]}
  echo "$name|$status|$((SECONDS - start))" >>"$results/.steps"
  return "$status"
}
rm -f "$results/.steps"

build() {
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DLOWBIT_CUDA=ON -DLOWBIT_BUILD_TESTS=ON &&
    cmake --build "$build_dir" -j "$(nproc)" ${GPU_CHECK_TARGETS:+--target $GPU_CHECK_TARGETS}
}
tests() {
  # Eight test processes share the GPU; two OpenMP threads each keep the CPU
  # references from oversubscribing the cores (spinning OpenMP teams of 16 x 4
  # processes made each GPU test spend most of its time waiting for a core).
  OMP_NUM_THREADS=2 ctest --test-dir "$build_dir" --output-on-failure -j 8 --output-junit "$results/ctest.xml" \
    ${GPU_CHECK_TESTS:+-R "$GPU_CHECK_TESTS"} ${GPU_CHECK_TARGETS:+-L gpu}
}
python_tests() {
  # The package built for this GPU, and its pytest suite (GPU tests included). The
  # build and test dependencies come from .wheels/ (scripts/python-wheels.sh) when
  # the machine has no network.
  LOWBIT_CUDA=ON LOWBIT_CUDA_ARCH=90a BUILD_DIR="$build_dir" bash scripts/python-test.sh
}
# The Llama-3-8B-shaped Q4_1 model the real-scale benchmarks use, written once (~4.6 GB,
# in $LOWBIT_SYNTH_DIR, default /tmp); `model synth` copies the tokenizer of
# $LOWBIT_TOKENIZER_FROM, else of the cached default model (a GPU machine without either:
# carry one, e.g. `lowbit model synth --preset tiny --type Q4_1` made where the model is,
# or the tokenizer alone: scripts/tokenizer_gguf.py, 1.8 MB).
synth_8b() {
  local out="${LOWBIT_SYNTH_DIR:-/tmp}/llama3-8b.Q4_1.gguf" from=()
  [ -n "${LOWBIT_TOKENIZER_FROM:-}" ] && from=(--tokenizer-from "$LOWBIT_TOKENIZER_FROM")
  [ -f "$out" ] || "$build_dir/bin/lowbit" model synth --preset llama3-8b --type Q4_1 --out "$out" "${from[@]}" >&2 ||
    return 1
  echo "$out"
}

# lowbit serve on a model (selective INT4 in a 40 GB KV budget, 64 sequences at once), and
# lowbit bench serve against it at concurrency 1 and 64 (512-token prompts, 256 generated):
# the serving issue's latency target. SERVE_DEVICE (default gpu) and SERVE_KV_GB (40) for
# a trial on a small machine.
serve_bench() {  # serve_bench MODEL NAME
  local model="$1" name="$2" log="$results/$2-server.log" port="" pid ok=0
  "$build_dir/bin/lowbit" serve --model "$model" --device "${SERVE_DEVICE:-gpu}" --port 0 --kv-cache selective4 \
    --kv-memory "${SERVE_KV_GB:-40}" --parallel 64 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do  # the model's load: up to 10 minutes
    port="$(sed -n 's|.*listening on http://[^:]*:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)"
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  if [ -n "$port" ]; then
    "$build_dir/bin/lowbit" bench serve --port "$port" --concurrency 1,64 --prompt-tokens 512 --max-tokens 256 \
      --json "$results/$name.json" >"$results/bench-$name.md" 2>&1 && ok=1
    cat "$results/bench-$name.md"
  else
    echo "gpu-check: lowbit serve did not start (its log: $log)"
    tail -n 5 "$log"
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [ "$ok" = 1 ]
}

benchmarks() {
  # Names: the `lowbit bench` benchmarks (kvquant, gemm), kv-attention (the decode
  # attention at 2K / 8K / 32K), prefill (its rows form: a 512-row chunk, tensor cores
  # against SIMT), kv-batch (the paged form: 16 and 64 sequences in one launch), and
  # flash (`bench attention` at the full clock, --idle-ms 1, and held busy, --sample-ms 20,
  # each beside PyTorch's SDPA timed alike where torch imports: bench/notes/flash.md),
  # the evaluations `attention` and `kvcache` (`lowbit eval ...`; kvcache needs the
  # model: scripts/fetch-model.sh); on the synthesized 8B model (synth_8b): decode-8b
  # (batch-1 decode at 2K / 8K / 32K per policy), batch-8b (B = 1 / 16 / 64 after 2K
  # prompts, 128 generated as the serving issue's llama-batched-bench figures, with the
  # step profile; and 32 sequences of 8K), batch-8b-pdl (the same B = 1 / 16 / 64 with
  # --no-pdl, full cache: what programmatic launch buys) and serve-8b
  # (serve_bench).
  local status=0
  for name in ${GPU_CHECK_BENCH-kvquant gemm attention flash kvcache}; do
    local command=(bench "$name")
    case "$name" in
      attention) command=(eval attention) ;;
      flash)
        local regime
        for regime in "idle1 --idle-ms 1" "sample20 --sample-ms 20"; do
          local tag flag value
          read -r tag flag value <<<"$regime"
          "$build_dir/bin/lowbit" bench attention "$flag" "$value" --json "$results/flash-$tag.json" \
            >"$results/bench-flash-$tag.md" || status=1
          cat "$results/bench-flash-$tag.md"
          if python3 -c "import torch" 2>/dev/null; then
            python3 bench/attention/sdpa_peer.py "$results/flash-$tag-sdpa.json" "$flag" "$value" \
              >"$results/bench-flash-$tag-sdpa.md" || status=1
            cat "$results/bench-flash-$tag-sdpa.md"
          fi
        done
        continue ;;
      kv-attention) command=(bench kv-attention --context 2048,8192,32768) ;;
      prefill) command=(bench kv-attention --rows 512 --context 2048,8192,32768) ;;
      kv-batch) command=(bench kv-attention --batch 16,64 --context 2048,8192) ;;
      decode-8b | batch-8b | batch-8b-pdl | serve-8b)
        local model
        if ! model="$(synth_8b)"; then
          echo "gpu-check: no 8B model (synth failed: see above): $name skipped"
          status=1
          continue
        fi
        if [ "$name" = serve-8b ]; then
          serve_bench "$model" "$name" || status=1
          continue
        elif [ "$name" = decode-8b ]; then
          command=(bench decode --model "$model" --context 2048,8192,32768 --policy full,selective8,selective4)
        elif [ "$name" = batch-8b-pdl ]; then
          command=(bench batch --model "$model" --device gpu --npp 2048 --ntg 128 --npl 1,16,64 --kv-cache full --no-pdl)
        else
          "$build_dir/bin/lowbit" bench batch --model "$model" --device gpu --npp 8192 --ntg 64 --npl 32 \
            --json "$results/batch-8b-32x8k.json" >"$results/bench-batch-8b-32x8k.md" || status=1
          cat "$results/bench-batch-8b-32x8k.md"
          command=(bench batch --model "$model" --device gpu --npp 2048 --ntg 128 --npl 1,16,64 --profile)
        fi ;;
      kvcache)
        if [ ! -f "${LOWBIT_MODEL:-${LOWBIT_CACHE:-$HOME/.cache/lowbit}/models/SmolLM2-135M-Instruct.Q4_1.gguf}" ]; then
          echo "gpu-check: no model (scripts/fetch-model.sh or LOWBIT_MODEL): eval kvcache skipped"
          continue
        fi
        command=(eval kvcache --device gpu --png "$results/kvcache-memory.png") ;;
    esac
    "$build_dir/bin/lowbit" "${command[@]}" --json "$results/$name.json" >"$results/bench-$name.md" || status=1
    cat "$results/bench-$name.md"
  done
  return "$status"
}

# Suites whose kernels use shared memory or barriers (quantize reductions, block-format
# decode, every GEMM, weight-only GEMV/MMA/wgmma, attention, the KV cache's decode
# attention contiguous and paged, argmax and add + RMSNorm, the sampler's radix selection),
# for racecheck and synccheck; EngineGpu and GpuBatchEngineGpu run the same kernels on the
# whole model.
shared_memory_suites="AllSpecs/QuantProduction SeedVariants NonFinite ZeroDomains BlockFormatsGpu IntGemmGpu
  WeightOnlyGpu WeightOnlyWgmmaGpu AttentionGpu FlashAttentionGpu KvCacheGpu KvKeyBlockGpu PagedKvGpu ForwardKernelsGpu
  SamplingGpu"
# Tests left out of racecheck and synccheck: the same kernels as their suites' other
# tests, at shapes too large for the tools (minutes of hazard tracking per launch).
# (racecheck did not finish KvCacheGpu's rows-form tests or FlashAttentionGpu in 120-170 s
# on the H200: the twin-in-double tests cover the same kernels at small shapes.)
large_shape_tests="IntGemmGpu.Int8LargeShapes:BlockFormatsGpu.LargeTensorForGridStrideLoops\
:KvCacheGpu.RowsFormMatchesOneAtATime:KvCacheGpu.RowsFormOnTensorCoresMatchesTheSimtKernel\
:FlashAttentionGpu.LongSequenceAndGivenScale"

# The tests of the chosen suites, one full name a line (Suite.Test), without `exclude`
# (a ':'-separated list of full names).
sanitize_tests() {  # sanitize_tests BINARY "SUITES" EXCLUDE
  "$1" --gtest_list_tests | awk -v suites=" $2 " -v exclude=":$3:" '
    /^[^ ]/ { suite = $1; sub(/\.$/, "", suite); next }
    /^  / {
      name = suite "." $1
      if (index(suites, " " suite " ") && !index(exclude, ":" name ":")) print name
    }'
}

sanitize_one() {  # sanitize_one TOOL TEST: one process; appends "tool|suite|test|verdict|errors" to results.txt
  local tool="$1" test="$2" options=(--tool "$1" --error-exitcode 1 --print-limit 50)
  case "$tool" in
    memcheck) options+=(--leak-check full) ;;
    racecheck) options+=(--racecheck-report all) ;;
  esac
  local name="$tool-${test//\//_}" limit="${GPU_CHECK_SANITIZE_TIMEOUT:-900}"
  # LOWBIT_TEST_SANITIZER: the shape sweeps take their subsets (tests/common/gpu.h).
  LOWBIT_TEST_SANITIZER=1 timeout -k 30 "$limit" "$sanitizer" "${options[@]}" --log-file "$out/$name.log" \
    "$binary" --gtest_filter="$test" --gtest_brief=1 >"$out/$name.out" 2>&1
  local code=$? verdict=ok
  case "$code" in
    0) ;;
    255)  # a host-only test: the tool finds no CUDA call to check
      if grep -q "terminated before first instrumented API call" "$out/$name.log" &&
        grep -q "^\[  PASSED  \]" "$out/$name.out"; then
        verdict="ok (no CUDA call)"
      else
        verdict="FAILED ($code)"
      fi ;;
    124 | 137) verdict="TIMEOUT ($limit s)" ;;
    *) verdict="FAILED ($code)" ;;
  esac
  local errors
  errors="$(grep -hE "(ERROR|RACECHECK|LEAK) SUMMARY" "$out/$name.log" 2>/dev/null | sed 's/^========= //' | paste -sd ';' -)"
  echo "$tool|${test%%.*}|$test|$verdict|${errors:-none printed}" >>"$out/results.txt"
}

# Every chosen tool over every test of its suites, GPU_CHECK_SANITIZE_JOBS processes at a
# time (default: half the cores; the tools are CPU-bound, the GPU holds many small
# processes). Per-test reports in sanitize/<tool>-<test>.log, every test's line in
# sanitize/results.txt, a line per suite and tool in sanitize/summary.md.
sanitize() {
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [ ! -x "$sanitizer" ]; then
    echo "gpu-check: compute-sanitizer not found (CUDA toolkit's bin/)"
    return 1
  fi
  binary="$build_dir/tests/lowbit_gpu_tests" out="$results/sanitize"
  mkdir -p "$out"
  rm -f "$out/results.txt"
  local all_suites jobs="${GPU_CHECK_SANITIZE_JOBS:-$(($(nproc) / 2))}"
  [ "$jobs" -ge 1 ] || jobs=1
  all_suites="$("$binary" --gtest_list_tests | grep -E '^[^ ]+\.$' | sed 's/\.$//' | tr '\n' ' ')"
  for tool in ${GPU_CHECK_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    local suites="$all_suites" exclude=""
    case "$tool" in
      memcheck) ;;
      racecheck | synccheck) suites="$shared_memory_suites" exclude="$large_shape_tests" ;;
      *) echo "gpu-check: unknown sanitizer tool '$tool'"; return 1 ;;
    esac
    local running=0
    for test in $(sanitize_tests "$binary" "${GPU_CHECK_SANITIZE_SUITES:-$suites}" "$exclude"); do
      [[ -n "${GPU_CHECK_SANITIZE_TESTS:-}" && ! "$test" =~ $GPU_CHECK_SANITIZE_TESTS ]] && continue
      sanitize_one "$tool" "$test" &
      running=$((running + 1))
      if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
      fi
    done
    wait
    echo "--- $tool: $(grep -c "^$tool|" "$out/results.txt" 2>/dev/null || echo 0) tests"
  done
  # One line per tool and suite: tests ok of run, the worst verdicts, the summaries seen.
  {
    printf '| tool | suite | ok | not ok (test: verdict) | compute-sanitizer summaries |\n|---|---|---:|---|---|\n'
    sort -t'|' -k1,1 -k2,2 -k3,3 "$out/results.txt" | awk -F'|' '
      function flush() {
        if (key != "") printf "| %s | %s | %d of %d | %s | %s |\n", tool, suite, ok, n, bad == "" ? "-" : bad, sums
      }
      $1 "|" $2 != key {
        flush(); key = $1 "|" $2; tool = $1; suite = $2; ok = 0; n = 0; bad = ""; sums = ""; delete seen
      }
      {
        n++
        if ($4 ~ /^ok/) ok++; else bad = bad (bad == "" ? "" : "; ") $3 ": " $4
        split($5, parts, ";")
        for (i in parts) if (!(parts[i] in seen)) { seen[parts[i]] = 1; sums = sums (sums == "" ? "" : "; ") parts[i] }
      }
      END { flush() }'
  } >"$out/summary.md"
  awk -F'|' '$4 !~ /^ok/ { bad = 1 } END { exit bad }' "$out/results.txt"
}

ok=1
step build build.log build || ok=0
if [ "$ok" = 1 ] && [ "$sanitize_mode" = 1 ]; then
  step sanitize sanitize.log sanitize || ok=0
elif [ "$ok" = 1 ]; then
  step tests test.log tests || ok=0
  [ "${GPU_CHECK_PYTHON:-1}" = 1 ] && { step python python-test.log python_tests || ok=0; }
  step bench bench.log benchmarks || ok=0
fi

echo
echo "=== gpu-check summary ($("$build_dir/bin/lowbit" --version 2>/dev/null || echo 'lowbit: not built')${LOWBIT_COMMIT:+; results name $LOWBIT_COMMIT})"
head -n 1 "$results/nvidia-smi.txt" >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
printf '| step | status | seconds |\n|---|---|---:|\n'
while IFS='|' read -r name status seconds; do
  printf '| %s | %s | %s |\n' "$name" "$([ "$status" = 0 ] && echo ok || echo "FAILED ($status)")" "$seconds"
done <"$results/.steps"
grep -E "tests passed|tests failed" "$results/test.log" 2>/dev/null | tail -n 1
if [ "$sanitize_mode" = 1 ] && [ -f "$results/sanitize/summary.md" ]; then
  echo
  echo "## compute-sanitizer (reports in $results/sanitize/)"
  cat "$results/sanitize/summary.md"
fi
grep -E "^[0-9]+ (passed|failed)|[0-9]+ passed" "$results/python-test.log" 2>/dev/null | tail -n 1 | sed 's/^/pytest: /'
if [ -f "$results/bench-kvquant.md" ]; then
  echo
  sed -n '/^## Summary/,$p' "$results/bench-kvquant.md"
fi
if [ -f "$results/bench-gemm.md" ]; then
  echo
  echo "## GEMM (production and peers; full tables in bench-gemm.md)"
  grep -E "^\| (op|---)|production|wgmma|cublas|MISMATCH|over 5e-3" "$results/bench-gemm.md" | grep -Ev "^\| int8 i32 \| (naive|tiled|vectorized|wmma) " | awk '!seen[$0]++' | head -n 60
fi
rm -f "$results/.steps"
[ "$ok" = 1 ]
