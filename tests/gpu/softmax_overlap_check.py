#!/usr/bin/env python3
"""The flash kernels' softmax under the P V product, read from the compiled library (no GPU).

A wgmma flash step issues S_t = Q K_t^T and P_t-1 V_t-1 together, waits for S_t (SASS:
WARPGROUP.DEPBAR.LE gsb0, 0x1), computes the softmax of S_t while P_t-1 V_t-1 runs, and only
then waits for it (DEPBAR.LE gsb0, 0x0) to rescale O. Nothing in the source keeps ptxas
from moving that second wait above the softmax, and in session 44 it had: none of the
tile's exponentials (MUFU.EX2) lay between the two waits, so the softmax never ran under the
product, 4-6% of the kernel's speed at head_dim 128 (bench/notes/flash.md step 11). Each rule
names kernels whose first such pair of waits must enclose at least `min_mufu` MUFU
instructions (a tile's 64 exponentials a thread). Every rule must match at least one kernel.

usage: softmax_overlap_check.py LIBRARY [--cuobjdump PATH] [--cxxfilt PATH]
"""
import sys

from library_kernels import run_sass_rules

# (pattern on the demangled name without namespaces, least MUFU between the waits, why)
RULES = [
    (r"^flash_wgmma_kernel<128, ", 64, "the flash prefill at head_dim 128"),
    (r"^flash_mixed_cache_kernel<128, ", 64, "the prefill over the engine's quantized caches at head_dim 128"),
]


def mufu_between_waits(code):
    """MUFU instructions between the first wait for all but one wgmma group and the next
    wait for all of them; None where the kernel has no such pair."""
    start = next((i for i, text in enumerate(code) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in text), None)
    if start is None:
        return None
    count = 0
    for text in code[start + 1:]:
        if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in text:
            return count
        words = text.split()
        opcode = words[1] if words[0].startswith("@") else words[0]  # past a predicate
        count += opcode.startswith("MUFU")
    return None


def check(name, code, rule):
    """A failure message where the rule's kernel has too few MUFU between the waits, else None."""
    _, least, why = rule
    n = mufu_between_waits(code)
    if n is None:
        return f"{name}: no wait for S followed by a wait for P V in the SASS ({why})"
    if n < least:
        return (f"{name}: {n} MUFU between the wait for S and the wait for P V, at least {least} wanted: "
                f"ptxas moved the wait above the softmax ({why})")
    return None


if __name__ == "__main__":
    sys.exit(run_sass_rules("softmax_overlap_check", __doc__, RULES, check))
