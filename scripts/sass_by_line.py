#!/usr/bin/env python3
"""A kernel's SASS by source line: static instructions, and with an ncu source export the
executed instructions, stall samples and their main reason, per line.

Why: the decode kernels are bound by latency and by what their code costs, not by FLOPs,
and which source line owns the instructions, the samples or the instruction-fetch stalls
(`no_inst`) is what decides the next change (bench/notes/decode.md, session 30: the
quantized attention's two inlined copies of its prologue's issues). The build carries line
information (-lineinfo), so no GPU is needed for the static half.

usage: sass_by_line.py OBJECT KERNEL_REGEX [--ncu-source CSV] [--file NAME] [--inner] [--top N]

  OBJECT        a compiled .cu object (build/src/CMakeFiles/lowbit.dir/cuda/...cu.o)
  KERNEL_REGEX  matched against the demangled kernel names; must pick exactly one
  --ncu-source  `ncu -i REPORT --page source --print-source sass --csv` of a launch of it
  --file NAME   attribute each instruction to its outermost inlined frame in this source
                file (default: the file the kernel is defined in); --inner: its innermost
"""
import argparse
import collections
import csv
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile


def tool(name):
    """A CUDA tool from PATH, NVDISASM_PATH (nvdisasm) or the cache scripts/setup.sh fills."""
    found = shutil.which(name) or shutil.which(name, path=os.environ.get("NVDISASM_PATH", ""))
    cache = os.environ.get("LOWBIT_CACHE", os.path.expanduser("~/.cache/lowbit"))
    found = found or next(iter(glob.glob(os.path.join(cache, "tools/nvidia/*/bin", name))), None)
    if not found:
        sys.exit(f"sass_by_line: {name} not found (scripts/setup.sh --tests fetches it)")
    return found


def functions(obj, wanted=None):
    """{mangled name: [(offset, [(file, line), ...] innermost first, instruction text)]} of the
    object's kernels; with `wanted` (a regex on demangled names) only the cubins that hold
    a match are disassembled (a library holds hundreds)."""
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(obj)], cwd=tmp, check=True,
                       capture_output=True)
        for cubin in sorted(glob.glob(os.path.join(tmp, "*.cubin"))):
            if wanted:
                names = sorted({m.decode() for m in re.findall(rb"\.text\.(_Z[0-9A-Za-z_]+)", open(cubin, "rb").read())})
                if not any(re.search(wanted, d) for d in demangle(names)):
                    continue
            text = subprocess.run([tool("nvdisasm"), "-gi", "-c", cubin], check=True, capture_output=True,
                                  text=True).stdout
            name, frames, fresh = None, [], True
            for line in text.splitlines():
                m = re.match(r"\.text\.(\S+):$", line)
                if m:
                    name = m.group(1)
                    result[name] = []
                    continue
                m = re.match(r'\s*//## File "([^"]+)", line (\d+)', line)
                if m:
                    if fresh:
                        frames, fresh = [], False
                    frames.append((os.path.basename(m.group(1)), int(m.group(2))))
                    continue
                m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", line)
                if m and name:
                    fresh = True
                    result[name].append((int(m.group(1), 16), list(frames), m.group(2)))
    return result


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def ncu_rows(path):
    """{offset from the kernel's first instruction: ncu's row} of a source-page export."""
    rows = list(csv.reader(open(path)))
    header = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    keys = rows[header]
    data = [dict(zip(keys, r)) for r in rows[header + 1:] if len(r) == len(keys)]
    base = int(data[0]["Address"], 16)
    return {int(r["Address"], 16) - base: r for r in data}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("object")
    ap.add_argument("kernel")
    ap.add_argument("--ncu-source")
    ap.add_argument("--file")
    ap.add_argument("--inner", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    found = functions(args.object, args.kernel)
    if not found:
        sys.exit(f"sass_by_line: no kernel of {args.object} matches {args.kernel!r}")
    names = list(found)
    picked = [m for m, d in zip(names, demangle(names)) if re.search(args.kernel, d)]
    if len(picked) != 1:
        listing = "\n  ".join(demangle(picked or names)[:40])
        sys.exit(f"sass_by_line: {len(picked)} kernels match {args.kernel!r}; candidates:\n  {listing}")
    code = found[picked[0]]
    home = args.file or next((f[-1][0] for _, f, _ in code if f), "?")
    samples = ncu_rows(args.ncu_source) if args.ncu_source else {}
    stalls = [k for k in next(iter(samples.values()), {}) if k.startswith("stall_") and "Not Issued" not in k]
    per_line = collections.defaultdict(lambda: {"static": 0, "executed": 0, "samples": 0,
                                                "stalls": collections.Counter()})
    for offset, frames, _ in code:
        if args.inner:
            key = frames[0] if frames else ("?", 0)
        else:
            mine = [f for f in frames if f[0] == home]
            key = mine[-1] if mine else (frames[-1] if frames else ("?", 0))
        entry = per_line[key]
        entry["static"] += 1
        row = samples.get(offset)
        if row:
            entry["executed"] += int(row.get("Instructions Executed") or 0)
            entry["samples"] += int(row.get("# Samples") or 0)
            for s in stalls:
                entry["stalls"][s[len("stall_"):]] += int(row.get(s) or 0)
    print(f"{demangle(picked)[0]}: {len(code)} instructions ({len(code) * 16 / 1024:.1f} KB)")
    order = sorted(per_line.items(), key=lambda kv: -(kv[1]["samples"] if samples else kv[1]["static"]))
    print("| line | static | executed | samples | top stalls |")
    print("|---|---:|---:|---:|---|")
    for (file, line), e in order[:args.top]:
        top = ", ".join(f"{k} {v}" for k, v in e["stalls"].most_common(2) if v)
        print(f"| {file}:{line} | {e['static']} | {e['executed']} | {e['samples']} | {top} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
