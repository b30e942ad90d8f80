"""Timing of a CUDA call with torch's events: min / median / max ms of one call over samples of
back-to-back calls (the benchmarks' peers: lowbit.bench_attention, bench/attention/sdpa_peer.py).
No lowbit imports, so that a script can load this file alone where the package is not built."""
import math
import statistics
import time


def time_ms(torch, call, samples: int = 15, sample_ms: float = 1.0, idle_ms: float = 0.0):
    """min / median / max ms of one call over `samples` samples, each of back-to-back calls
    lasting >= sample_ms, the host idle idle_ms before each: the rule of lowbit's own
    benchmarks (bench/common/timing.cu's gpu_sample_ms), so that a peer is timed as lowbit is."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(repeat):
        start.record()
        for _ in range(repeat):
            call()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / repeat

    timed(1)  # warm-up
    repeat = min(max(math.ceil(sample_ms / max(timed(3), 1e-4)), 1), 2000)
    times = []
    for _ in range(samples):
        if idle_ms > 0:
            time.sleep(idle_ms / 1000.0)
        times.append(timed(repeat))
    return min(times), statistics.median(times), max(times)
