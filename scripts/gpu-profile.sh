#!/usr/bin/env bash
# Nsight Compute on the kernels the open speed targets hinge on, one launch of each, for a
# GPU machine where ncu reads the hardware counters (clocks left alone). Run after a build
# (gpu-check.sh builds build-gpu). Reports (.ncu-rep, and each as CSV) go to RESULTS_DIR
# (default out/gpu-profile); summary.md, printed last, has a line per kernel: time, DRAM
# and L2 throughput, issue slots, occupancy, registers and the top warp stall reasons.
#   usage: scripts/gpu-profile.sh [RESULTS_DIR]
# GPU_PROFILE_CASES="paged-int8-b64 rows-f16" picks cases (default all, below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
results="${1:-out/gpu-profile}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
lowbit="${BUILD_DIR:-build-gpu}/bin/lowbit"
ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)"
if [ -z "$ncu" ] || [ ! -x "$lowbit" ]; then
  echo "gpu-profile: needs ncu (Nsight Compute) and $lowbit (build first: scripts/gpu-check.sh)" >&2
  exit 1
fi
if [ -d .deps/root ]; then  # the offline machine's unpacked packages (gpu-check.sh)
  export LD_LIBRARY_PATH="$PWD/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# name | mangled kernel name (D, body bits, swap, paged for the decode kernel) | lowbit arguments
# (gemv-q4_1-m1: the sweep's first launch, the production GEMV at 28672 x 8192, Q4_1, M = 1;
# gemv-q4_1-m1-4k / -m16-4k: the production GEMV at 4096 x 4096 (the 8B O projection, a narrow
# shape: 2 tiles a warp, 4-step chunks), M = 1 and 16 (B = 16 decode);
# wgmma-q4_1-m64: the first launch of the 64-activation-row wgmma kernel, Q4_1 at 64 x 4096 x 4096;
# wgmma-q4_1-m512: the 128-row one at 512 x 28672 x 8192, the prompt chunks' compute-bound shape;
# wgmma-tma-*: the same shapes with the TMA loads, Variant::tma; m32-28k: 32 x 28672 x 8192,
# where Q4 and Q8 take the same time: the medium-M kernel is not bandwidth-bound there)
cases="paged-f16-b64|kv_attention_mma_kernelILi128ELi0ELb1ELb1E|bench kv-attention --batch 64 --context 2048 --policy full
paged-int8-b64|kv_attention_mma_kernelILi128ELi8ELb1ELb1E|bench kv-attention --batch 64 --context 2048 --policy int8
paged-int4-b64|kv_attention_mma_kernelILi128ELi4ELb1ELb1E|bench kv-attention --batch 64 --context 2048 --policy int4
paged-f16-b16|kv_attention_mma_kernelILi128ELi0ELb1ELb1E|bench kv-attention --batch 16 --context 2048 --policy full
decode-int8-32k|kv_attention_mma_kernelILi128ELi8ELb1ELb0E|bench kv-attention --context 32768 --policy int8
rows-f16-8k|rows_mma_kernel|bench kv-attention --rows 512 --context 8192 --policy full
gemv-q4_1-m1|gemv_kernel|bench gemm --section weight_only_variants --max-m 1
gemv-q4_1-m1-4k|gemv_kernel|bench gemm --section weight_only --shape 4096x4096 --max-m 1
gemv-q4_1-m16-4k|gemv_kernel|bench gemm --section weight_only --shape 4096x4096 --min-m 16 --max-m 16
wgmma-q4_1-m64|wgmma_kernelI6__half.*Li64ELi1ELb0EE|bench gemm --section weight_only_wgmma --quick --max-m 64
wgmma-q4_1-m512|wgmma_kernelI6__half.*Li128ELi2ELb0EE|bench gemm --section weight_only_wgmma --shape 28672x8192 --min-m 512 --max-m 512
wgmma-tma-q4_1-m64|wgmma_kernelI6__half.*Li64ELi1ELb1EE|bench gemm --section weight_only_wgmma --quick --max-m 64
wgmma-tma-q4_1-m512|wgmma_kernelI6__half.*Li128ELi2ELb1EE|bench gemm --section weight_only_wgmma --shape 28672x8192 --min-m 512 --max-m 512
wgmma-tma-q4_1-m32-28k|wgmma_kernelI6__half.*Li32ELi1ELb1EE|bench gemm --section weight_only_wgmma --shape 28672x8192 --min-m 32 --max-m 32"

status=0
while IFS='|' read -r name kernel arguments; do
  if [ -n "${GPU_PROFILE_CASES:-}" ] && [[ " $GPU_PROFILE_CASES " != *" $name "* ]]; then continue; fi
  echo "=== $name: $kernel ($arguments)"
  # shellcheck disable=SC2086  # the arguments are words
  if ! "$ncu" --clock-control none --set full --kernel-name-base mangled --kernel-name "regex:$kernel" \
    --launch-count 1 -f -o "$results/$name" "$lowbit" $arguments >"$results/$name.log" 2>&1; then
    echo "gpu-profile: $name failed (see $results/$name.log)"
    status=1
    continue
  fi
  "$ncu" --import "$results/$name.ncu-rep" --page details --csv >"$results/$name.csv" 2>/dev/null || status=1
  "$ncu" --import "$results/$name.ncu-rep" --page raw --csv >"$results/$name.raw.csv" 2>/dev/null || status=1
  # Per-instruction samples for scripts/sass_by_line.py (--ncu-source); not *.csv: the
  # summary below reads those.
  "$ncu" --import "$results/$name.ncu-rep" --page source --print-source sass --csv \
    >"$results/$name.source.txt" 2>/dev/null || status=1
done <<<"$cases"

python3 - "$results" <<'EOF'
import csv, glob, os, sys
results = sys.argv[1]
wanted = [("Duration", "time"), ("DRAM Throughput", "DRAM %"), ("L2 Cache Throughput", "L2 %"),
          ("Issue Slots Busy", "issue %"), ("Achieved Occupancy", "occupancy %"),
          ("Registers Per Thread", "registers"), ("Block Limit Registers", "blocks (regs)"),
          ("Block Limit Shared Mem", "blocks (smem)")]
lines = ["| case | " + " | ".join(label for _, label in wanted) + " | top stalls (cycles a warp-instruction) |",
         "|---|" + "---:|" * len(wanted) + "---|"]
for path in sorted(p for p in glob.glob(os.path.join(results, "*.csv")) if not p.endswith(".raw.csv")):
    metric = {}
    for r in csv.DictReader(open(path)):
        metric.setdefault(r.get("Metric Name", ""), f"{r.get('Metric Value', '')} {r.get('Metric Unit', '')}".strip())
    # The stall reasons from the raw page: cycles a warp spends stalled per issued instruction.
    stalls = []
    raw = path[:-4] + ".raw.csv"
    if os.path.exists(raw):
        table = list(csv.reader(open(raw)))
        if len(table) >= 3:
            prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
            for column, key in enumerate(table[0]):
                if key.startswith(prefix) and key.endswith(suffix):
                    try:
                        stalls.append((float(table[2][column].replace(",", "")), key[len(prefix):-len(suffix)]))
                    except ValueError:
                        pass
    top = ", ".join(f"{n} {v:.2f}" for v, n in sorted(stalls, reverse=True)[:4]) or "-"
    case = os.path.basename(path)[:-4]
    lines.append(f"| {case} | " + " | ".join(metric.get(m, "-") for m, _ in wanted) + f" | {top} |")
open(os.path.join(results, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
exit "$status"
