#!/usr/bin/env python3
"""No read-only load above the PDL wait, read from the compiled library (no GPU needed).

A kernel launched with programmatic dependent launch may start while its predecessor
runs; it reads what the predecessor wrote only after griddepcontrol.wait (SASS: ACQBULK).
A read-only load (`__ldg`, ld.global.nc; SASS: LDG...CONSTANT) promises that its data does
not change while the kernel runs, so ptxas may move it above the wait: in session 30 it
moved the decode attention's q loads there once the code around them changed, and the
selective policies read q before the append wrote it (bench/notes/decode.md). Each rule
names kernels that read q, activations or cache rows (16-byte loads) only after their
n-th wait, or by cp.async before it: no 16-byte LDG...CONSTANT may come before that wait in
the SASS. (Narrower loads may: the paged kernels read their page tables, written before
the step, with __ldg before the wait by design.) Every rule must match at least one kernel.

usage: pdl_wait_check.py LIBRARY [--cuobjdump PATH] [--cxxfilt PATH]
"""
import re
import sys

from library_kernels import run_sass_rules

# (pattern on the demangled name without namespaces, the wait (1-based in SASS order; -1 the
# last), why)
RULES = [
    (r"^kv_attention_mma_kernel<\d+, [48], ", -1,
     "the quantized decode attention: its body tiles go by cp.async before the wait, q and the "
     "appended rows after it"),
    (r"^gemv_kernel<", 2, "the GEMV fills its ring with weights (cp.async) before the wait, the activations after"),
]

WIDE_READ_ONLY_LOAD = re.compile(r"\bLDG\.E\.128\.CONSTANT\b")


def check(name, code, rule):
    """A failure message where a 16-byte read-only load precedes the rule's wait, else None."""
    _, wait, why = rule
    waits = [j for j, text in enumerate(code) if text.split()[-1] == "ACQBULK"]
    if len(waits) < abs(wait):
        return f"{name}: {len(waits)} waits, the rule reads wait {wait} ({why})"
    at = waits[wait - 1 if wait > 0 else wait]
    early = [text for text in code[:at] if WIDE_READ_ONLY_LOAD.search(text)]
    if early:
        return f"{name}: {len(early)} 16-byte read-only loads before wait {wait}, e.g. {early[0].strip()!r} ({why})"
    return None


if __name__ == "__main__":
    sys.exit(run_sass_rules("pdl_wait_check", __doc__, RULES, check))
