"""scripts/kernel_trace_summary.py on a hand-made trace in the CSV layout of
tools/kernel_trace: overlapping, nested, touching and separated kernels, exact numbers for
the busy / idle split and the pair gaps; names shortened and grouped; the selections."""
import csv
import importlib.util
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "kernel_trace_summary.py"
HEADER = ("start_ns,end_ns,duration_ns,stream,graph_id,graph_node_id,grid_x,grid_y,grid_z,"
          "block_x,block_y,block_z,dynamic_smem,registers,name").split(",")
GEMV = "void lowbit::cuda::(anonymous namespace)::gemv_kernel<4, lowbit::cuda::Q4_1>(lowbit::cuda::Q4_1 const*, float*)"
NORM = "void lowbit::cuda::rms_norm_kernel(float const*, float*, int)"
ATTN = 'attn<"x", 2>'  # a quote and a comma, as the tracer quotes them
# (start, end, name), deliberately out of order: the summary sorts by start.
#   gemv 1000-2000, norm 1500-2500 (overlaps: gap -500), gemv 2500-3000 (touches: 0),
#   norm 4000-4500 (after 1000 idle), gemv 4200-4300 (inside norm: -300),
#   attn 5000-5200 (700 after gemv's end, 500 after norm's: idle counts 500).
RECORDS = [(4000, 4500, NORM), (1000, 2000, GEMV), (2500, 3000, GEMV), (1500, 2500, NORM),
           (5000, 5200, ATTN), (4200, 4300, GEMV), (0, 0, GEMV)]  # the last: incomplete at exit


def load():
    spec = importlib.util.spec_from_file_location("kernel_trace_summary", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "trace.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(HEADER)
        for start, end, name in RECORDS:
            w.writerow([start, end, max(end - start, 0), 7, 1, 42, 128, 1, 1, 256, 1, 1, 0, 64, name])
    return path


def test_names_shortened():
    s = load()
    assert s.short_name(GEMV) == "gemv_kernel<4, Q4_1>"
    assert s.short_name(NORM) == "rms_norm_kernel"
    assert s.short_name(ATTN) == ATTN
    assert s.short_name("_Z6kernelPf") == "_Z6kernelPf"  # not demangled: kept
    assert s.display_names(["abcdefgh1", "abcdefgh2", "ab"], 6) == {"ab": "ab", "abcdefgh1": "abc...",
                                                                   "abcdefgh2": "abc... #2"}


def test_busy_idle_and_gaps(trace):
    s = load()
    kernels, incomplete = s.read_trace(trace)
    assert incomplete == 1
    assert [k.start for k in kernels] == [1000, 1500, 2500, 4000, 4200, 5000]
    # span 1000..5200; busy [1000, 3000] + [4000, 4500] + [5000, 5200]; idle 1000 + 500.
    assert s.busy_idle(kernels) == (4200, 2700, 1500, 2)
    gemv, norm = "gemv_kernel<4, Q4_1>", "rms_norm_kernel"
    assert s.pair_gaps(kernels) == {(gemv, norm): (2, -500 + 1000), (norm, gemv): (2, 0 - 300), (gemv, ATTN): (1, 700)}
    assert s.per_name(kernels) == {gemv: (3, 1600, 100, 1000), norm: (2, 1500, 500, 1000), ATTN: (1, 200, 200, 200)}


def test_critical_path(trace):
    s = load()
    kernels, _ = s.read_trace(trace)
    gemv, norm = "gemv_kernel<4, Q4_1>", "rms_norm_kernel"
    # gemv 1000 (first: its duration), norm +500, gemv +500, norm +1500 (1000 of it idle),
    # gemv 0 (ends inside norm), attn +700: 4200 in all, the span.
    shares = s.critical_path(kernels)
    assert shares == {gemv: (3, 1500), norm: (2, 2000), ATTN: (1, 700)}
    assert sum(total for _, total in shares.values()) == s.busy_idle(kernels)[0]
    assert s.critical_path([]) == {}


def test_selections(trace):
    s = load()
    kernels, _ = s.read_trace(trace)
    last = s.select(kernels, last_n=2)
    assert [k.start for k in last] == [4200, 5000]
    assert s.busy_idle(last) == (1000, 300, 700, 1)
    assert [k.start for k in s.select(kernels, skip_first=4)] == [4200, 5000]
    assert [k.start for k in s.select(kernels, window=(1500, 4200))] == [1500, 2500, 4000]
    assert [k.start for k in s.select(kernels, window=(1500, 4201), skip_first=1, last_n=2)] == [4000, 4200]
    assert s.select(kernels, last_n=0) == []
    assert s.busy_idle([]) == (0, 0, 0, 0)


def test_report(trace):
    out = subprocess.run([sys.executable, str(SCRIPT), str(trace)], capture_output=True, text=True, check=True).stdout
    assert "# Kernel trace: 6 kernels, 3 names (1 incomplete records left out)" in out
    # span, busy, idle in us; idle 1500 / 4200; kernel time 3300 / 4200.
    assert "| 4.20 | 2.70 | 1.50 | 35.71 | 2 | 0.79 |" in out
    assert "| gemv_kernel<4, Q4_1> | 3 | 0.002 | 48.5 | 0.53 | 0.10 | 1.00 |" in out
    def table(title):  # the data rows of the section whose heading starts with title
        section = out.split("## " + title, 1)[1].split("\n## ", 1)[0]
        return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| a |")
                and not line.startswith("| kernel |")]

    assert table("What each kernel adds") == ["| rms_norm_kernel | 2 | 2.00 | 47.6 | 1.00 |",
                                              "| gemv_kernel<4, Q4_1> | 3 | 1.50 | 35.7 | 0.50 |",
                                              '| attn<"x", 2> | 1 | 0.70 | 16.7 | 0.70 |']
    rows = table("Gaps")
    assert rows == ['| gemv_kernel<4, Q4_1> | attn<"x", 2> | 1 | 0.70 | 0.70 |',
                    "| gemv_kernel<4, Q4_1> | rms_norm_kernel | 2 | 0.25 | 0.50 |",
                    "| rms_norm_kernel | gemv_kernel<4, Q4_1> | 2 | -0.15 | -0.30 |"]
    narrow = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--last-n", "2", "--name-width", "8"],
                            capture_output=True, text=True, check=True).stdout
    assert "| 1.00 | 0.30 | 0.70 | 70.00 | 1 | 0.30 |" in narrow
    assert "| gemv_... | attn<... | 1 | 0.70 | 0.70 |" in narrow


def test_by_predecessor(trace):
    s = load()
    kernels, _ = s.read_trace(trace)
    gemv, norm = "gemv_kernel<4, Q4_1>", "rms_norm_kernel"
    renamed = s.by_predecessor(kernels)
    assert [k.name for k in renamed] == [f"{gemv} < (start)", f"{norm} < {gemv}", f"{gemv} < {norm}",
                                         f"{norm} < {gemv}", f"{gemv} < {norm}", f"{ATTN} < {gemv}"]
    assert [(k.start, k.end) for k in renamed] == [(k.start, k.end) for k in kernels]
    # The critical path split by place: gemv 1000 + 500 + 0, norm 500 + 1500, attn 700.
    assert s.critical_path(renamed) == {f"{gemv} < (start)": (1, 1000), f"{gemv} < {norm}": (2, 500),
                                        f"{norm} < {gemv}": (2, 2000), f"{ATTN} < {gemv}": (1, 700)}
    out = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--by-predecessor", "--name-width", "0"],
                         capture_output=True, text=True, check=True).stdout
    assert f"| {gemv} < {norm} | 2 | 0.50 | 11.9 | 0.25 |" in out


def test_bad_input(tmp_path):
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.csv")], capture_output=True, text=True)
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    negative = subprocess.run([sys.executable, str(SCRIPT), "x.csv", "--last-n", "-1"], capture_output=True, text=True)
    assert negative.returncode == 2
