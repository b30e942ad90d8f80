"""Prefill attention: lowbit.flash_attention against PyTorch's scaled_dot_product_attention
in the same process, on the same tensors (issue 16: "faster than PyTorch's SDPA measured
in the same run").

    python -m lowbit.bench_attention [--seq-len N] [--heads H] [--kv-heads G] [--head-dim D]
                                     [--dtype float16,bfloat16] [--idle-ms X] [--sample-ms X] [--json FILE]

For each dtype, head_dim and mask it checks that the two outputs agree (max |difference|),
then times each over back-to-back calls with CUDA events: ms min / median / max of the
samples, and TFLOPS at the median (4 D H L^2 operations, halved by the causal mask). SDPA
runs with its default backend choice (FlashAttention-2 or cuDNN on an H100), on [1, H, L, D]
views of the same memory; GQA through its enable_gqa. Timings only need a GPU; nothing
is written but the JSON.
"""
from __future__ import annotations

import argparse
import sys

import lowbit
from lowbit._cuda_timing import time_ms
from lowbit._json import write_json


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lowbit.bench_attention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32)
    parser.add_argument("--head-dim", default="128,64", help="64, 128 or both (default both)")
    parser.add_argument("--dtype", default="float16,bfloat16")
    parser.add_argument("--idle-ms", type=float, default=0.0, help="the host sleeps this long before each sample")
    parser.add_argument("--sample-ms", type=float, default=1.0,
                        help="back-to-back calls until a sample lasts this long (20: a long prefill's load)")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("bench_attention: needs torch", file=sys.stderr)
        return 1
    if not torch.cuda.is_available() or not lowbit.built_with_cuda:
        print("bench_attention: needs a CUDA GPU and lowbit built with CUDA", file=sys.stderr)
        return 1
    seq, heads, kv = args.seq_len, args.heads, args.kv_heads
    rows = []
    print(f"# prefill attention, L {seq}, {heads} query heads over {kv} KV heads, one sequence; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| dtype | head_dim | mask | op | ms min | ms median | ms max | TFLOPS (median) | vs SDPA | max abs diff |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for dtype_name in args.dtype.split(","):
        dtype = getattr(torch, dtype_name)
        for head_dim in (int(d) for d in args.head_dim.split(",")):
            torch.manual_seed(0)
            q = torch.randn(seq, heads, head_dim, device="cuda", dtype=dtype)
            k = torch.randn(seq, kv, head_dim, device="cuda", dtype=dtype)
            v = torch.randn(seq, kv, head_dim, device="cuda", dtype=dtype)
            qt, kt, vt = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, H, L, D] views
            for causal in (True, False):
                flops = 4.0 * head_dim * heads * seq * seq / (2 if causal else 1)

                def ours():
                    return lowbit.flash_attention(q, k, v, causal=causal)

                def sdpa():
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=kv != heads)

                diff = (ours().float() - sdpa()[0].transpose(0, 1).float()).abs().max().item()
                t_sdpa = time_ms(torch, sdpa, sample_ms=args.sample_ms, idle_ms=args.idle_ms)
                t_ours = time_ms(torch, ours, sample_ms=args.sample_ms, idle_ms=args.idle_ms)
                mask = "causal" if causal else "none"
                for name, t in (("lowbit", t_ours), ("sdpa", t_sdpa)):
                    tflops = flops / (t[1] * 1e9)
                    print(f"| {dtype_name} | {head_dim} | {mask} | {name} | {t[0]:.3f} | {t[1]:.3f} | {t[2]:.3f} | "
                          f"{tflops:.0f} | {t_sdpa[1] / t[1]:.2f}x | {diff:.2e} |")
                    rows.append({"dtype": dtype_name, "head_dim": head_dim, "causal": causal, "op": name,
                                 "ms_min": t[0], "ms": t[1], "ms_max": t[2], "tflops": tflops,
                                 "vs_sdpa": t_sdpa[1] / t[1], "max_abs_diff": diff})
    print("\nTFLOPS: 4 x head_dim x heads x L^2 (halved by the causal mask) over the median time.")
    if args.json:
        write_json(args.json, {"seq_len": seq, "heads": heads, "kv_heads": kv, "gpu": torch.cuda.get_device_name(),
                               "idle_ms": args.idle_ms, "sample_ms": args.sample_ms,
                               "torch": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
