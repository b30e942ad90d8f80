#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention alone (its default backend choice) at `lowbit bench
attention`'s shapes, for the GPU machine where lowbit's Python package is not built: the peer
of that benchmark, run in the same lease. Timing as lowbit.bench_attention's: back-to-back
calls between CUDA events, min / median / max of 15 samples, TFLOPS at the median.

    python3 bench/attention/sdpa_peer.py OUT.json [--seq-len 8192] [--heads 32]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def time_ms(call, samples=15, min_ms=2.0):
    call()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    stop.record()
    stop.synchronize()
    repeat = max(1, int(min_ms / max(start.elapsed_time(stop), 1e-3)))
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(repeat):
            call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / repeat)
    return min(times), statistics.median(times), max(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    args = parser.parse_args()
    seq, heads = args.seq_len, args.heads
    rows = []
    print(f"# PyTorch SDPA, L {seq}, {heads} heads; torch {torch.__version__}, {torch.cuda.get_device_name()}\n")
    print("| dtype | head_dim | mask | ms min | ms median | ms max | TFLOPS (median) |\n|---|---:|---|---:|---:|---:|---:|")
    for dtype in ("float16", "bfloat16"):
        for head_dim in (128, 64):
            q, k, v = (torch.randn(1, heads, seq, head_dim, device="cuda", dtype=getattr(torch, dtype)) for _ in range(3))
            for causal in (True, False):
                t = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                tflops = 4.0 * head_dim * heads * seq * seq / (2 if causal else 1) / (t[1] * 1e9)
                mask = "causal" if causal else "none"
                print(f"| {dtype} | {head_dim} | {mask} | {t[0]:.3f} | {t[1]:.3f} | {t[2]:.3f} | {tflops:.0f} |")
                rows.append({"dtype": dtype, "head_dim": head_dim, "causal": causal, "ms_min": t[0], "ms": t[1],
                             "ms_max": t[2], "tflops": tflops})
    with open(args.json, "w") as f:
        json.dump({"benchmark": "attention-sdpa-peer", "seq_len": seq, "heads": heads, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
