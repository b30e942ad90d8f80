#!/usr/bin/env python3
"""The hot kernels' stack frames, read from the compiled library (no GPU needed).

A kernel that keeps a variable in local memory pays a store and a dependent load through
L1 each time it touches it; in the decode step's kernels that cost 10% of the quantized
decode attention and a 424-byte frame in the append kernel (bench/notes/decode.md, session
24), and nothing but a profile shows it. This check reads `cuobjdump -res-usage` of the
library, demangles the kernel names and holds each rule's kernels to its stack ceiling;
the first rule whose pattern matches a kernel applies, and every rule must match at least
one kernel (a renamed kernel does not escape it).

usage: kernel_stack_check.py LIBRARY [--cuobjdump PATH] [--cxxfilt PATH]
"""
import re
import subprocess
import sys

from library_kernels import parse_args, plain_names, report

# (pattern on the demangled name without namespaces, most stack bytes, why that many):
# the kernels of a decode step (batch 1 and batched) and of prefill.
RULES = [
    (r"^kv_attention_mma_kernel<\d+, \d, true, ", 0, "the swap decode attention (B = 1 and paged)"),
    (r"^kv_append_kernel<", 0, "the decode step's RoPE + append"),
    (r"^kv_append_rows_kernel<", 0, "prefill's append"),
    (r"^gemv_kernel<__half, \(Form\)9, 1, 2, 2, 4, true>", 80,
     "the ragged run, and one 32-bit value of the epilogue's tile index that the Q2_K sub-block kernel "
     "spills at its 80-register cap since session 50's 32-bit chunk loop: stored before the loop, read "
     "once after it (SASS read; bench/notes/decode.md)"),
    (r"^gemv_kernel<", 64, "the ragged tail's activation run, in local memory by design"),
    (r"^(add_rms_norm_kernel|add_rms_norm_vec_kernel<|silu_mul_kernel|embed_kernel|argmax_kernel)", 0,
     "the decode step's small kernels"),
    (r"^(rope_rows_kernel<|sample_kernel)", 0, "prefill's RoPE, the sampler"),
    (r"^wgmma_kernel<", 0, "the weight-only GEMM of batched decode and prefill (M > 16)"),
    (r"^flash_wgmma_kernel<", 0, "the full cache's flash prefill"),
    (r"^flash_mixed_cache_kernel<\d+, 4, true>", 288,
     "the key-block instance's producer spills (at head_dim 64 one producer warpgroup dequantizes K per "
     "channel and V at 32 registers; bench/notes/kv_accuracy.md, sessions 37-38)"),
    (r"^flash_mixed_cache_kernel<64, ", 80,
     "the producers' spills at their register cap (80 bytes since session 38's masks by two compares, "
     "which ptxas allotted otherwise: the 1B prefill measured 2-5% faster all the same; bench/notes/kv_accuracy.md)"),
    (r"^flash_mixed_cache_kernel<", 64, "the producers' spills at their register cap (bench/notes/prefill.md)"),
]


def kernels(library, cuobjdump, cxxfilt):
    """(demangled name without namespaces, stack bytes) of every kernel in the library."""
    out = subprocess.run([cuobjdump, "-res-usage", library], check=True, capture_output=True, text=True).stdout
    mangled, stacks = [], []
    name = None
    for line in out.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        s = re.search(r"\bSTACK:(\d+)", line)
        if s and name is not None:
            mangled.append(name)
            stacks.append(int(s.group(1)))
            name = None
    return list(zip(plain_names(mangled, cxxfilt), stacks))


def main():
    args = parse_args(__doc__)
    found = kernels(args.library, args.cuobjdump, args.cxxfilt)
    if not found:
        print(f"kernel_stack_check: no kernels in {args.library}", file=sys.stderr)
        return 1
    matched = [0] * len(RULES)
    failures = []
    for name, stack in found:
        for i, (pattern, ceiling, why) in enumerate(RULES):
            if re.search(pattern, name):
                matched[i] += 1
                if stack > ceiling:
                    failures.append(f"{name}: {stack} bytes of stack, at most {ceiling} ({why})")
                break
    return report("kernel_stack_check", args.library, len(found), RULES, matched, failures)


if __name__ == "__main__":
    sys.exit(main())
