#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention alone (its default backend choice) at `lowbit bench
attention`'s shapes, for the GPU machine where lowbit's Python package is not built: the peer
of that benchmark, run in the same lease. Timing as lowbit.bench_attention's: back-to-back
calls between CUDA events (python/lowbit/_cuda_timing.py), min / median / max of 15 samples,
TFLOPS at the median.

    python3 bench/attention/sdpa_peer.py OUT.json [--seq-len 8192] [--heads 32]
"""
import argparse
import importlib.util
import json
from pathlib import Path

import torch
import torch.nn.functional as F

# lowbit's event timing, loaded alone: the package's __init__ needs its built extension.
_spec = importlib.util.spec_from_file_location(
    "lowbit_cuda_timing", Path(__file__).resolve().parents[2] / "python" / "lowbit" / "_cuda_timing.py")
_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timing)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--idle-ms", type=float, default=0.0, help="the host sleeps this long before each sample")
    parser.add_argument("--sample-ms", type=float, default=1.0,
                        help="back-to-back calls until a sample lasts this long (20: a long prefill's load)")
    args = parser.parse_args()
    seq, heads = args.seq_len, args.heads
    rows = []
    print(f"# PyTorch SDPA, L {seq}, {heads} heads; torch {torch.__version__}, {torch.cuda.get_device_name()}\n")
    print("| dtype | head_dim | mask | ms min | ms median | ms max | TFLOPS (median) |\n|---|---:|---|---:|---:|---:|---:|")
    for dtype in ("float16", "bfloat16"):
        for head_dim in (128, 64):
            q, k, v = (torch.randn(1, heads, seq, head_dim, device="cuda", dtype=getattr(torch, dtype)) for _ in range(3))
            for causal in (True, False):
                t = _timing.time_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                    sample_ms=args.sample_ms, idle_ms=args.idle_ms)
                tflops = 4.0 * head_dim * heads * seq * seq / (2 if causal else 1) / (t[1] * 1e9)
                mask = "causal" if causal else "none"
                print(f"| {dtype} | {head_dim} | {mask} | {t[0]:.3f} | {t[1]:.3f} | {t[2]:.3f} | {tflops:.0f} |")
                rows.append({"dtype": dtype, "head_dim": head_dim, "causal": causal, "ms_min": t[0], "ms": t[1],
                             "ms_max": t[2], "tflops": tflops})
    with open(args.json, "w") as f:
        json.dump({"benchmark": "attention-sdpa-peer", "seq_len": seq, "heads": heads, "torch": torch.__version__,
                   "idle_ms": args.idle_ms, "sample_ms": args.sample_ms,
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
