"""Timing of a CUDA call with torch's events: min / median / max ms of one call over samples of
back-to-back calls (the benchmarks' peers: lowbit.bench_attention, bench/attention/sdpa_peer.py).
No lowbit imports, so that a script can load this file alone where the package is not built."""
import statistics


def time_ms(torch, call, samples: int = 15, min_ms: float = 2.0):
    """min / median / max ms of one call over `samples` samples of back-to-back calls."""
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
