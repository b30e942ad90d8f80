#!/usr/bin/env python3
"""Summarizes a kernel trace written by liblowbit_kernel_trace.so (tools/kernel_trace) as
Markdown: time per kernel name; how much of the timeline no kernel runs (the gaps a
CUDA graph's launches leave); what each kernel adds to the timeline's end (its share of
the critical path, which overlapping launches hide from its duration); and the gap
between each pair of consecutive kernel names,
start(b) - end(a), negative where they overlap (programmatic dependent launch). Python
standard library only.

    kernel_trace_summary.py TRACE.csv [--skip-first N] [--last-n N]
                            [--window START_NS END_NS] [--by-predecessor] [--name-width W]

Records are taken in start order; --window keeps those starting in [START_NS, END_NS),
--skip-first then drops the first N (warm-up) and --last-n keeps the last N (a
steady-state stretch, e.g. the last decode steps); --by-predecessor then groups each record
by its name and the name of the record before it (a GEMV's O and down products apart).
Records left incomplete at exit (start 0, or an end before the start) are left out and
counted."""
import argparse
import csv
import re
import sys
from collections import defaultdict
from typing import NamedTuple


class Kernel(NamedTuple):
    start: int
    end: int
    name: str

    @property
    def duration(self):
        return self.end - self.start


_ANONYMOUS = "(anonymous namespace)::"
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*::)+")


def _strip_parameters(name):
    """The name without its trailing parameter list: "f<a>(int, T*)" -> "f<a>"."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i] if i > 0 else name
    return name


def short_name(name):
    """A demangled kernel name without return type, parameters, namespaces and class
    qualifiers: "void lowbit::cuda::(anonymous namespace)::gemv<4, lowbit::Q4>(float*)"
    -> "gemv<4, Q4>". Kernels are grouped by this name."""
    name = name.replace(_ANONYMOUS, "")
    name = _strip_parameters(name.strip())
    if name.startswith("void "):
        name = name[len("void "):]
    return _QUALIFIER.sub("", name)


def read_trace(path):
    """The complete records of a trace in start order, and how many were incomplete."""
    kernels, incomplete = [], 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            start, end = int(row["start_ns"]), int(row["end_ns"])
            if start == 0 or end < start:
                incomplete += 1
                continue
            kernels.append(Kernel(start, end, short_name(row["name"])))
    kernels.sort(key=lambda k: (k.start, k.end))
    return kernels, incomplete


def select(kernels, window=None, skip_first=0, last_n=None):
    """The records of a sorted trace that the options keep, in the order the module's
    docstring gives."""
    if window is not None:
        kernels = [k for k in kernels if window[0] <= k.start < window[1]]
    kernels = kernels[skip_first:]
    if last_n is not None:
        kernels = kernels[-last_n:] if last_n > 0 else []
    return kernels


def by_predecessor(kernels):
    """Each record renamed "name < previous name" (the record that started before it; the
    first: "name < (start)"), so that one kernel at two places of a step, e.g. a GEMV
    after the attention (the O projection) and after the gate|up GEMV (down), gets two
    rows in every table."""
    renamed, previous = [], "(start)"
    for k in kernels:
        renamed.append(k._replace(name=f"{k.name} < {previous}"))
        previous = k.name
    return renamed


def per_name(kernels):
    """{name: (count, total, min, max)} of the durations in ns."""
    stats = {}
    for k in kernels:
        count, total, low, high = stats.get(k.name, (0, 0, k.duration, k.duration))
        stats[k.name] = (count + 1, total + k.duration, min(low, k.duration), max(high, k.duration))
    return stats


def busy_idle(kernels):
    """(span, busy, idle, idle stretches) in ns for records sorted by start: span from the
    first start to the last end, busy the length of the union of the kernels' intervals,
    idle = span - busy, the time no kernel runs, made of that many stretches."""
    if not kernels:
        return 0, 0, 0, 0
    busy, stretches = 0, 0
    run_start, run_end = kernels[0].start, kernels[0].end
    for k in kernels[1:]:
        if k.start > run_end:
            busy += run_end - run_start
            stretches += 1
            run_start, run_end = k.start, k.end
        else:
            run_end = max(run_end, k.end)
    busy += run_end - run_start
    span = max(k.end for k in kernels) - kernels[0].start
    return span, busy, span - busy, stretches


def pair_gaps(kernels):
    """{(name a, name b): (count, total gap)} over consecutive records in start order, gap
    = start(b) - end(a) in ns (negative when b starts before a ends)."""
    pairs = defaultdict(lambda: (0, 0))
    for a, b in zip(kernels, kernels[1:]):
        count, total = pairs[(a.name, b.name)]
        pairs[(a.name, b.name)] = (count + 1, total + b.start - a.end)
    return dict(pairs)


def critical_path(kernels):
    """{name: (count, total)} of what each record adds to the timeline in ns: for records
    sorted by start, the first its duration, each later one max(0, end - the latest end
    before it). The totals add up to the span. With programmatic dependent launch a
    kernel starts early and waits, so its duration overstates it; this is how much later
    the stretch ends because of it (idle time before a kernel is charged to it)."""
    shares = {}
    frontier = None
    for k in kernels:
        added = k.duration if frontier is None else max(0, k.end - frontier)
        frontier = k.end if frontier is None else max(frontier, k.end)
        count, total = shares.get(k.name, (0, 0))
        shares[k.name] = (count + 1, total + added)
    return shares


def display_names(names, width):
    """Each name cut to `width` characters ("..." marking the cut; 0: whole), made unique
    with " #2", " #3" where cuts collide."""
    shown, seen = {}, defaultdict(int)
    for name in sorted(names):
        text = name if width <= 0 or len(name) <= width else name[:max(width - 3, 1)] + "..."
        seen[text] += 1
        shown[name] = text if seen[text] == 1 else f"{text} #{seen[text]}"
    return shown


def _cell(text):
    return text.replace("|", "\\|")


def report(kernels, incomplete, width):
    lines = []
    span, busy, idle, stretches = busy_idle(kernels)
    names = per_name(kernels)
    shown = display_names(names, width)
    total_kernel = sum(s[1] for s in names.values())
    lines.append(f"# Kernel trace: {len(kernels)} kernels, {len(names)} names"
                 + (f" ({incomplete} incomplete records left out)" if incomplete else ""))
    lines.append("")
    lines.append("## Busy and idle")
    lines.append("")
    lines.append("| span us | busy us | idle us | idle % of span | idle stretches | kernel time / span |")
    lines.append("|---:|---:|---:|---:|---:|---:|")
    pct = 100.0 * idle / span if span else 0.0
    ratio = total_kernel / span if span else 0.0
    lines.append(f"| {span / 1e3:.2f} | {busy / 1e3:.2f} | {idle / 1e3:.2f} | {pct:.2f} | {stretches} | {ratio:.2f} |")
    lines.append("")
    lines.append("Idle: the time between the first start and the last end when no kernel runs. "
                 "Kernel time / span above 1 means kernels overlap.")
    lines.append("")
    lines.append("## Kernels, by total time")
    lines.append("")
    lines.append("| kernel | count | total ms | % of kernel time | mean us | min us | max us |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, (count, total, low, high) in sorted(names.items(), key=lambda item: (-item[1][1], item[0])):
        share = 100.0 * total / total_kernel if total_kernel else 0.0
        lines.append(f"| {_cell(shown[name])} | {count} | {total / 1e6:.3f} | {share:.1f} | "
                     f"{total / count / 1e3:.2f} | {low / 1e3:.2f} | {high / 1e3:.2f} |")
    lines.append("")
    lines.append("## What each kernel adds to the timeline (critical path), by total")
    lines.append("")
    lines.append("Each record's end past the latest end before it (the first record: its duration); "
                 "the totals add up to the span. Idle time is charged to the kernel after it.")
    lines.append("")
    lines.append("| kernel | count | total us | % of span | mean us |")
    lines.append("|---|---:|---:|---:|---:|")
    for name, (count, total) in sorted(critical_path(kernels).items(), key=lambda item: (-item[1][1], item[0])):
        share = 100.0 * total / span if span else 0.0
        lines.append(f"| {_cell(shown[name])} | {count} | {total / 1e3:.2f} | {share:.1f} | {total / count / 1e3:.2f} |")
    lines.append("")
    lines.append("## Gaps between consecutive kernels, by total gap")
    lines.append("")
    lines.append("gap = start(b) - end(a) for b the next kernel to start after a; negative: b starts before a ends.")
    lines.append("")
    lines.append("| a | b | count | mean gap us | total gap us |")
    lines.append("|---|---|---:|---:|---:|")
    pairs = pair_gaps(kernels)
    for (a, b), (count, total) in sorted(pairs.items(), key=lambda item: (-item[1][1], item[0])):
        lines.append(f"| {_cell(shown[a])} | {_cell(shown[b])} | {count} | {total / count / 1e3:.2f} | "
                     f"{total / 1e3:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="CSV written by liblowbit_kernel_trace.so")
    parser.add_argument("--skip-first", type=int, default=0, metavar="N", help="drop the first N records (warm-up)")
    parser.add_argument("--last-n", type=int, metavar="N", help="keep only the last N records")
    parser.add_argument("--window", type=int, nargs=2, metavar=("START_NS", "END_NS"),
                        help="keep the records that start in [START_NS, END_NS)")
    parser.add_argument("--by-predecessor", action="store_true",
                        help='group each record as "name < the name of the record before it"')
    parser.add_argument("--name-width", type=int, default=60, metavar="W",
                        help="cut kernel names to W characters (default 60; 0: whole names)")
    args = parser.parse_args(argv)
    if args.skip_first < 0 or (args.last_n is not None and args.last_n < 0):
        parser.error("--skip-first and --last-n take a count (0 or more)")
    try:
        kernels, incomplete = read_trace(args.trace)
    except (OSError, KeyError, ValueError) as e:
        print(f"kernel_trace_summary: cannot read {args.trace}: {e!r}", file=sys.stderr)
        return 1
    kernels = select(kernels, args.window, args.skip_first, args.last_n)
    if args.by_predecessor:
        kernels = by_predecessor(kernels)
    sys.stdout.write(report(kernels, incomplete, args.name_width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
