"""Host time per call of lowbit's Python entry points on small tensors (issue 6: "a call
on a small tensor costs under 10 microseconds of host time above the kernel").

    python -m lowbit.bench_overhead [--calls N] [--json FILE] [--no-cuda] [--no-torch] [--no-cpu]
                                    [--processes N]

For each call it reports
  host_us    wall time of N back-to-back calls / N, without synchronizing (on the GPU the
             kernels are shorter than the calls, so this is the host's time per call:
             Python, argument checks, DLPack conversion, output allocation, the launch);
  kernel_us  (GPU) device time per call: N calls captured in a CUDA graph and replayed,
             timed with CUDA events (what the GPU spends, launch gaps excluded);
  floor_us   the raw _lowbit call with its outputs (and workspace) allocated beforehand:
             on the CPU on NumPy arrays of the same memory (the library's work plus the
             least a binding call costs); on the GPU the call the wrapper makes, on the torch
             tensors themselves (the DLPack export, or for quantize's outputs and status word
             their addresses, the C++ checks and the launches), where there is one;
  over_us    host_us - kernel_us on the GPU (the host time above the kernel); on the CPU,
             host_us - floor_us: what the Python layer, the output allocation and (torch
             rows) torch's DLPack export add.
next to torch's own ops on the same tensors (an empty_like, which launches nothing, and
a one-kernel add) for scale. Medians of 7 runs. Then the `step` rows: the parts of a CUDA
quantize_tensor timed one by one (cuda_steps). Timings only: nothing is checked.

The lent H100 hosts differ by up to ~40% in these times from one machine (and process)
to the next, torch's own ops included: compare rows of one run, or run with --processes N
(each row's min and median over N fresh processes; over_us then from the mins).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import lowbit
from lowbit import _lowbit
from lowbit._json import write_json


def host_us(fn, calls: int, sync=None, repeats: int = 7) -> float:
    for _ in range(min(calls, 100)):
        fn()
    if sync:
        sync()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
        if sync:
            sync()
    return statistics.median(runs)


def graph_kernel_us(torch, fn, calls: int = 100, repeats: int = 7):
    """Device time per call of fn captured `calls` times into one CUDA graph; None if fn
    cannot be captured."""
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  (report, do not fail the benchmark)
        print(f"  (not capturable: {type(e).__name__}: {str(e).splitlines()[0][:80]})", file=sys.stderr)
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(runs)


def cpu_cases(like_torch: bool):
    """(name, call, floor call or None) on 4 x 64 inputs: NumPy arrays, or CPU torch tensors."""
    # The floors pass NumPy views of the same memory (the raw binding call at its cheapest).
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    a = rng.integers(-128, 128, (4, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (64, 64), dtype=np.int8)
    k = rng.standard_normal((2, 64)).astype(np.float16)
    q = rng.standard_normal((4, 64)).astype(np.float16)
    device = None
    if like_torch:
        import torch

        x, a, b, k, q = (torch.from_numpy(t) for t in (x, a, b, k, q))
        device = "cpu"
    codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
    c = lowbit.int8_matmul(a, b)
    out = lowbit.dequantize_tensor(codes, scales, None, "int8", "token")
    cache = lowbit.LayerKVCache("selective", 2, 64, 1 << 20, sink=4, window=8, kv_bits=8, device=device)
    reader = lowbit.LayerKVCache("selective", 2, 64, 64, sink=4, window=8, kv_bits=8, device=device)
    for _ in range(16):
        cache.append(k, k)
    reader.append(k, k)  # one token: the CPU attention's own work stays small beside the call
    att = reader.attention(q)
    xn, an, bn, cn, codes_n, scales_n, out_n, qn, att_n = (np.asarray(t) for t in (x, a, b, c, codes, scales, out, q,
                                                                                    att))

    def append():
        if cache.length == cache.capacity:
            cache.reset()
        cache.append(k, k)

    cases = [
        ("quantize_tensor int8 token 4x64", lambda: lowbit.quantize_tensor(x, "int8", "token"),
         lambda: _lowbit.quantize(xn, codes_n, scales_n, None, "int8", "token", 0, None, 0, False)),
        ("int8_matmul 4x64x64 -> i32", lambda: lowbit.int8_matmul(a, b),
         lambda: _lowbit.int8_matmul(an, bn, "k_by_n", cn, None, None, 1.0, None, False, 0)),
        ("dequantize_tensor int8 token 4x64", lambda: lowbit.dequantize_tensor(codes, scales, None, "int8", "token"),
         lambda: _lowbit.dequantize(codes_n, scales_n, None, "int8", "token", 0, out_n, 0)),
        ("LayerKVCache.append 2x64 selective", append, None),
        ("LayerKVCache.attention 4x64 at 1", lambda: reader.attention(q),
         lambda: reader._layer.attention(qn, att_n, reader.length, None, 0)),
    ]
    if like_torch:
        import torch

        from lowbit import torch_ops  # noqa: F401  (registers torch.ops.lowbit)

        cases += [("torch.ops.lowbit.int8_matmul (custom op)",
                   lambda: torch.ops.lowbit.int8_matmul(a, b, None, None, 1.0, None, False, "k_by_n", "i32"),
                   lambda: _lowbit.int8_matmul(an, bn, "k_by_n", cn, None, None, 1.0, None, False, 0)),
                  ("torch.empty_like 4x64 (no kernel)", lambda: torch.empty_like(x), None),
                  ("torch.add 4x64", lambda: torch.add(x, 1.0), None)]
    else:
        cases += [("np.empty 4x64", lambda: np.empty((4, 64), np.float32), None)]
    return cases


def gpu_cases(torch):
    dev = "cuda"
    x = torch.randn(4, 64, device=dev)
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8, device=dev)
    b = torch.randint(-128, 128, (64, 64), dtype=torch.int8, device=dev)
    k = torch.randn(2, 64, device=dev).half()
    q = torch.randn(4, 64, device=dev).half()
    codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
    cache = lowbit.LayerKVCache("selective", 2, 64, 1 << 20, sink=4, window=8, kv_bits=8, device=dev)
    reader = lowbit.LayerKVCache("selective", 2, 64, 64, sink=4, window=8, kv_bits=8, device=dev)
    for _ in range(64):
        cache.append(k, k)
        reader.append(k, k)  # stays at 64 tokens (the append row grows `cache`)
    bufs, spec = list(cache.buffers.values()), cache._spec()
    reader_bufs = list(reader.buffers.values())
    from lowbit import torch_ops  # noqa: F401  (registers torch.ops.lowbit; a plain `import lowbit.x` here would make `lowbit` local)
    from lowbit._backend import torch_backend

    # The floors' preallocated outputs, workspace and status word, and the current stream
    # (quantize_tensor passes its outputs and the word to _lowbit.quantize by address).
    stream = torch_backend().stream(x)
    word = torch_backend().status_word(x)
    codes_o, scales_o = torch.empty_like(codes), torch.empty_like(scales)
    codes_p, scales_p, word_p = codes_o.data_ptr(), scales_o.data_ptr(), word.data_ptr()
    deq_o, c_o = torch.empty(4, 64, device=dev), torch.empty(32, 64, dtype=torch.int32, device=dev)
    att_o = reader.attention(q)
    att_ws = next(iter(reader._workspaces.values()))

    def append():
        if cache.length == cache.capacity:
            cache.reset()
        cache.append(k, k)

    return [  # (name, eager call, capturable equivalent or None, floor or None)
        ("quantize_tensor int8 token 4x64", lambda: lowbit.quantize_tensor(x, "int8", "token"),
         lambda: torch.ops.lowbit.quantize(x, "int8", "token", 0),
         lambda: _lowbit.quantize(x, codes_p, scales_p, 0, "int8", "token", 0, None, stream, True, word_p)),
        ("quantize_tensor check=True (syncs)", lambda: lowbit.quantize_tensor(x, "int8", "token", check=True),
         None, None),
        ("dequantize_tensor int8 token 4x64", lambda: lowbit.dequantize_tensor(codes, scales, None, "int8", "token"),
         lambda: lowbit.dequantize_tensor(codes, scales, None, "int8", "token"),
         lambda: _lowbit.dequantize(codes, scales, None, "int8", "token", 0, deq_o, stream)),
        ("int8_matmul 32x64x64 -> i32", lambda: lowbit.int8_matmul(a, b), lambda: lowbit.int8_matmul(a, b),
         lambda: _lowbit.int8_matmul(a, b, "k_by_n", c_o, None, None, 1.0, None, False, stream)),
        ("torch.ops.lowbit.int8_matmul (custom op)",
         lambda: torch.ops.lowbit.int8_matmul(a, b, None, None, 1.0, None, False, "k_by_n", "i32"),
         lambda: torch.ops.lowbit.int8_matmul(a, b, None, None, 1.0, None, False, "k_by_n", "i32"), None),
        ("LayerKVCache.append 2x64 selective", append,
         lambda: torch.ops.lowbit.kv_append(*bufs, k, k, "selective", spec, 40), None),
        ("LayerKVCache.attention 4x64 at 64", lambda: reader.attention(q),
         lambda: torch.ops.lowbit.kv_attention(*reader_bufs, q, "selective", reader._spec(), 64, "f32"),
         lambda: reader._layer.attention(q, att_o, 64, att_ws, stream)),
        ("torch._int_mm 32x64x64", lambda: torch._int_mm(a, b), lambda: torch._int_mm(a, b), None),
        ("torch.empty_like 4x64 (no kernel)", lambda: torch.empty_like(x), None, None),
        ("torch.add 4x64", lambda: torch.add(x, 1.0), lambda: torch.add(x, 1.0), None),
    ]


def cuda_steps(torch):
    """(name, microseconds) of the steps of quantize_tensor int8 token 4x64 on CUDA,
    each timed alone: the Python layer's, torch's allocations, the binding call, and in
    C++ loops the library call, an empty launch and an output made through the DLPack
    exchange API (the other way to allocate)."""
    from lowbit._backend import backend_of
    from lowbit._ops import quant

    x = torch.randn(4, 64, device="cuda")
    backend = backend_of(x)
    stream, status = backend.stream_and_status(x)
    codes, scales, _ = lowbit.quantize_tensor(x, "int8", "token")
    word = backend.status_word(x)
    codes_p, scales_p = codes.data_ptr(), scales.data_ptr()
    sync = torch.cuda.synchronize
    rows = [
        ("backend_of + compiling()", host_us(lambda: backend_of(x).compiling(), 2000)),
        ("quant layout cache lookup", host_us(lambda: quant.LAYOUTS.get(("int8", "token", 0, 4, 64)), 2000)),
        ("stream_and_status", host_us(lambda: backend.stream_and_status(x), 2000)),
        ("new_empty 4x64 int8", host_us(lambda: x.new_empty(4, 64, dtype=torch.int8), 2000, sync)),
        ("new_empty 4 float32", host_us(lambda: x.new_empty(4, dtype=torch.float32), 2000, sync)),
        ("data_ptr()", host_us(lambda: codes.data_ptr(), 2000)),
        ("_lowbit.quantize (outputs by address)",
         host_us(lambda: _lowbit.quantize(x, codes_p, scales_p, 0, "int8", "token", 0, None, stream, True, status),
                 2000, sync)),
    ]
    for name, fn in [("C++ lowbit::quantize", lambda: _lowbit._time_quantize(x, codes, scales, word, stream, 2000)),
                     ("C++ empty kernel launch", lambda: _lowbit._time_launches(stream, 2000)),
                     ("C++ exchange-API output 4x64 f32", lambda: _lowbit._time_exchange_outputs(x, 2000))]:
        try:
            runs = [fn() for _ in range(7)]
            sync()
            rows.append((name, statistics.median(runs)))
        except Exception as e:  # noqa: BLE001  (report, do not fail the benchmark)
            print(f"  ({name}: {type(e).__name__}: {e})", file=sys.stderr)
    return rows


def over_processes(args, passed) -> int:
    """Runs the benchmark in args.processes fresh processes, one after another, and
    reports each row's host_us min and median over them, the min kernel_us and floor_us,
    and over_us from the mins (the lent hosts' times move by process: see above)."""
    import os
    import subprocess
    import tempfile

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):
            path = os.path.join(tmp, f"run-{i}.json")
            subprocess.run([sys.executable, "-m", "lowbit.bench_overhead", *passed, "--json", path], check=True,
                           stdout=subprocess.DEVNULL)
            with open(path) as f:
                runs.append(json.load(f)["rows"])
    rows = []
    print(f"{args.processes} processes, {args.calls} calls per run")
    print(f"{'device':6} {'call':42} {'host_min':>8} {'host_med':>8} {'kernel_us':>9} {'floor_us':>8} {'over_us':>8}")
    keyed = [{(r["device"], r["call"]): r for r in run} for run in runs]
    for first in runs[0]:
        same = [run.get((first["device"], first["call"])) for run in keyed]
        if None in same:  # a row some process could not time (a capture or step that failed)
            continue
        hosts = [r["host_us"] for r in same]
        least = lambda key: min((r[key] for r in same if r[key] is not None), default=None)  # noqa: E731
        kernel, floor = least("kernel_us"), least("floor_us")
        base = kernel if first["device"] == "cuda" else floor
        row = {"device": first["device"], "call": first["call"], "host_min_us": min(hosts),
               "host_median_us": statistics.median(hosts), "kernel_us": kernel, "floor_us": floor,
               "over_us": None if base is None else min(hosts) - base, "host_us_each": hosts}
        rows.append(row)
        fmt = lambda v: "" if v is None else f"{v:8.2f}"  # noqa: E731
        print(f"{row['device']:6} {row['call']:42} {row['host_min_us']:8.2f} {row['host_median_us']:8.2f} "
              f"{fmt(kernel):>9} {fmt(floor):>8} {fmt(row['over_us']):>8}")
    if args.json:
        write_json(args.json, {"calls": args.calls, "processes": args.processes, "rows": rows})
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000, help="calls per timed run (default 2000)")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--no-cuda", action="store_true", help="skip the GPU rows")
    p.add_argument("--no-torch", action="store_true", help="skip torch (CPU and GPU)")
    p.add_argument("--no-cpu", action="store_true", help="skip the CPU rows (NumPy and torch)")
    p.add_argument("--processes", type=int, default=1,
                   help="run in N fresh processes and report each row's min and median over them")
    args = p.parse_args(argv)
    if args.processes > 1:
        passed = [f"--calls={args.calls}"] + [f"--{flag}" for flag in ("no-cuda", "no-torch", "no-cpu")
                                             if getattr(args, flag.replace("-", "_"))]
        return over_processes(args, passed)
    have_torch = False
    if not args.no_torch:
        try:
            import torch

            have_torch = True
        except ImportError:
            pass
    rows = []

    def report(device, name, host, kernel=None, over=None, floor=None):
        rows.append({"device": device, "call": name, "host_us": host, "kernel_us": kernel, "floor_us": floor,
                     "over_us": over})
        fmt = lambda v: "" if v is None else f"{v:8.2f}"  # noqa: E731
        print(f"{device:6} {name:42} {host:8.2f} {fmt(kernel):>9} {fmt(floor):>8} {fmt(over):>8}", flush=True)

    print(f"lowbit {lowbit.__name__} built_with_cuda={lowbit.built_with_cuda}, {args.calls} calls per run")
    print(f"{'device':6} {'call':42} {'host_us':>8} {'kernel_us':>9} {'floor_us':>8} {'over_us':>8}")
    for like_torch in [] if args.no_cpu else [False, True] if have_torch else [False]:
        device = "torch" if like_torch else "numpy"
        for name, fn, floor in cpu_cases(like_torch):
            host = host_us(fn, args.calls)
            floor = host_us(floor, args.calls) if floor else None
            report(device, name, host, None, None if floor is None else host - floor, floor)
    if have_torch and not args.no_cuda and torch.cuda.is_available() and lowbit.built_with_cuda:
        sync = torch.cuda.synchronize
        for name, fn, capturable, floor in gpu_cases(torch):
            host = host_us(fn, args.calls, sync)
            kernel = graph_kernel_us(torch, capturable) if capturable else None
            floor = host_us(floor, args.calls, sync) if floor else None
            report("cuda", name, host, kernel, None if kernel is None else host - kernel, floor)
        # One of the C++ checks' CUDA pointer queries (the floors hold one a tensor).
        probe = torch.empty(64, device="cuda")
        report("cuda", "C++ pointer check (one a tensor)",
               min(_lowbit._time_pointer_checks(probe, 20000) for _ in range(7)))
        for name, us in cuda_steps(torch):
            report("step", name, us)
        print(f"device: {torch.cuda.get_device_name()}")
    if args.json:
        write_json(args.json, {"calls": args.calls, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
