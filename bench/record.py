#!/usr/bin/env python3
"""Records a benchmark run: RESULT.json becomes bench/results/<topic>-<gpu>.json (the
latest result of that topic on that GPU), and bench/results/history.jsonl gains one line
with the commit, the date, the GPU and the run's key figures.

    python3 bench/record.py TOPIC GPU RESULT.json [--table TABLE] [--commit C] [--note TEXT]
                            [--figures NAME=PATH ...] [--results-dir DIR]

A PATH picks one number out of the JSON: keys joined by dots, [N] for the N-th item of a
list, [key=value,...] for the first item whose fields all match (key^=value: the field
starts with value), e.g. rows[policy=full].decode_tokens_per_s_long_prompt (--figures goes
last: it takes every NAME=PATH after it). The known topics (DEFAULT_FIGURES) get their key
figures without --figures. Standard library only.
"""
import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _gemm(section, op, variant, m, n, k):
    return f"rows[section={section},op={op},variant={variant},M={m},N={n},K={k},b_layout=n_by_k]"


def _kvquant(case):  # the production kernel on f32 keys, INT8 per channel (the seed's case)
    return f"rows[case={case},variant=production,dtype=f32,scheme=int8,granularity=channel]"


def _wo(op, m):  # weight-only at the decode shape of its targets, 28672 x 8192
    return _gemm("weight_only", op, "production", m, 28672, 8192)


def _policy(name):
    return f"rows[policy={name}]"


def _attention(seq_len, variant):
    return f"cases[case=large synthetic,seq_len={seq_len}].variants[variant={variant}]"


def _overhead(device, call):
    return f"rows[device={device},call^={call}]"


# Key figures per topic: NAME -> PATH, or (PATH, PATH) for a ratio. A name ends in its
# unit (ms, us, tok_s, tops, pct_copy, x_<peer> for a speed-up); missing paths are skipped.
_GEMM_FIGURES = {
    "copy_gbps": "gpu_copy_gbps",
    "int8_wgmma_4096_tops": _gemm("int8", "int8 i32", "wgmma", 4096, 4096, 4096) + ".tops",
    "int8_wgmma_4096_x_cublaslt": _gemm("int8", "int8 i32", "wgmma", 4096, 4096, 4096) + ".speedup_vs_peer",
    "int8_wgmma_8192_x_cublaslt": _gemm("int8", "int8 i32", "wgmma", 8192, 8192, 8192) + ".speedup_vs_peer",
    "epilogue_f16_4096_x_cublaslt_and_kernel":
        _gemm("epilogue", "int8 scale+bias+relu", "wgmma fused", 4096, 4096, 4096) + ".speedup_vs_peer",
    "int4_4096_tops": _gemm("int4", "int4 i32", "production", 4096, 4096, 4096) + ".tops",
    "w4a16_g32_m1_ms": _wo("w4a16 g32 zp (Q4_1)", 1) + ".ms",
    "w4a16_g32_m1_x_cublas_f16": _wo("w4a16 g32 zp (Q4_1)", 1) + ".speedup_vs_peer",
    "w4a16_g32_m16_x_cublas_f16": _wo("w4a16 g32 zp (Q4_1)", 16) + ".speedup_vs_peer",
    "w4a16_g128_m1_ms": _wo("w4a16 g128 zp", 1) + ".ms",
    "w4a16_g128_m1_x_cublas_f16": _wo("w4a16 g128 zp", 1) + ".speedup_vs_peer",
    "w4a16_g128_m16_x_cublas_f16": _wo("w4a16 g128 zp", 16) + ".speedup_vs_peer",
    "w8a16_m1_pct_copy": _wo("w8a16 per-channel", 1) + ".pct_copy",
}

def _decode_figures(contexts):
    """`lowbit bench decode`: decode tok/s per context and policy, % of the copy ceiling and
    the prompt's prefill tok/s."""
    out = {}
    for context in contexts:
        for policy in ("full", "selective8", "selective4", "int8", "int4"):
            row = f"rows[context={context},policy={policy}]"
            out[f"{policy}_{context}_tok_s"] = row + ".decode_tokens_per_s"
            out[f"{policy}_{context}_pct_copy"] = row + ".pct_copy"
            out[f"{policy}_{context}_prefill_tok_s"] = row + ".prefill_tokens_per_s"
    return out


def _kv_attention_figures(contexts):
    """`lowbit bench kv-attention`: the tensor-core kernels' % of the copy ceiling (mma, and
    its variant mma_swap side by side until one is chosen)."""
    return {f"{policy}_{context}_{kernel}_pct_copy": f"rows[context={context},policy={policy},kernel={kernel}].pct_copy"
            for context in contexts for policy in ("full", "selective8", "selective4", "int8", "int4")
            for kernel in ("mma", "mma_swap")}


DEFAULT_FIGURES = {
    "decode-8b": _decode_figures((2048, 8192, 32768)),
    "decode-8b-32k": _decode_figures((2048, 8192, 32768)),
    # the same with the GEMVs' late PDL trigger, before it became the default (2a6c2da)
    "decode-8b-pdl-late": _decode_figures((2048, 8192)),
    "decode-1b": _decode_figures((2048, 8192)),
    "decode-8b-q4k": _decode_figures((2048, 8192)),
    "decode-8b-q4km": _decode_figures((2048, 8192)),
    "decode-8b-q6k": _decode_figures((2048, 8192)),
    "decode-8b-q5km": _decode_figures((2048, 8192)),
    "decode-8b-key-blocks": _decode_figures((2048, 8192)),
    "decode-70b": _decode_figures((2048,)),
    "decode-qwen-q4k": _decode_figures((2048, 8192)),
    "weight-only-blocks": {f"{t}_{n}x{k}_m1_{unit}": f"rows[op={t},N={n},K={k},M=1].{path}"
                           for t in ("Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q4_K", "Q4_K_groups", "Q5_K", "Q6_K", "Q3_K",
                                     "Q2_K")
                           for n, k in ((4096, 14336), (14336, 4096))
                           for unit, path in (("pct_copy", "pct_copy"), ("x_read", "speedup_vs_peer"))},
    "weight-only-blocks-prefill": {f"{t}_14336x4096_m{m}_{variant}_x_cublas": f"rows[op={t},M={m},variant={variant}].speedup_vs_peer"
                                   for t in ("Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q4_K_groups", "Q5_K", "Q6_K", "Q3_K", "Q2_K")
                                   for m in (256, 2048) for variant in ("production", "mma_sync_tiled")},
    "kv-attention": _kv_attention_figures((2048, 32768, 131072)),
    "kvquant": {
        "copy_gbps": "gpu_copy_gbps",
        "quant_pct_copy_65536x256": _kvquant("large") + ".quant_pct_copy",
        "dequant_pct_copy_65536x256": _kvquant("large") + ".dequant_pct_copy",
        "quant_pct_copy_131072x4096": _kvquant("llm_large") + ".quant_pct_copy",
        "dequant_pct_copy_131072x4096": _kvquant("llm_large") + ".dequant_pct_copy",
        "quant_with_scales_ms_131072x4096": _kvquant("llm_large") + ".quant_with_scales_ms",
    },
    "gemm": _GEMM_FIGURES,
    "weight-only": _GEMM_FIGURES,
    "eval-attention": {
        "flash_tflops_l8192": _attention(8192, "ours") + ".attention_kernel_tflops",
        "ours_ms_l4096": _attention(4096, "ours") + ".ms",
        "ours_x_tiled_fused_l4096": _attention(4096, "tiled_fused") + ".ours_speedup",
        "ours_ms_l8192": _attention(8192, "ours") + ".ms",
        "ours_kernel1_ms_l4096": _attention(4096, "ours") + ".qkv_kernel_ms",
        "llama_nf4_kernel1_ms": "cases[case=llama3-8b layer,format=nf4].variants[variant=ours].qkv_kernel_ms",
        "llama_nvfp4_kernel1_ms": "cases[case=llama3-8b layer,format=nvfp4].variants[variant=ours].qkv_kernel_ms",
        "llama_nf4_ours_ms": "cases[case=llama3-8b layer,format=nf4].variants[variant=ours].ms",
        "nf4_rel_rmse": "formats[format=nf4].rel_rmse",
        "mxfp4_rel_rmse": "formats[format=mxfp4].rel_rmse",
        "nvfp4_rel_rmse": "formats[format=nvfp4].rel_rmse",
    },
    "eval-kvcache": {
        "long_prompt_tokens": "speed_prompt_tokens",
        "full_decode_tok_s_long_prompt": _policy("full") + ".decode_tokens_per_s_long_prompt",
        "full_decode_tok_s_short_prompt": _policy("full") + ".decode_tokens_per_s",
        "selective_int8_x_full": (_policy("selective8") + ".decode_tokens_per_s_long_prompt",
                                  _policy("full") + ".decode_tokens_per_s_long_prompt"),
        "full_prefill_s_long_prompt": _policy("full") + ".prefill_seconds_long_prompt",
        "selective_int8_kv_x_full": _policy("selective8") + ".kv_ratio_vs_full",
        "selective_int4_kv_x_full": _policy("selective4") + ".kv_ratio_vs_full",
        "ppl_tokens": _policy("full") + ".tokens_scored",
        "full_ppl": _policy("full") + ".ppl",
        "selective_int8_ppl": _policy("selective8") + ".ppl",
        "selective_int4_ppl": _policy("selective4") + ".ppl",
    },
    "batch-8b": {f"{p}_b{b}_{part}_tok_s": f"results[policy={p},b={b}].{key}.tokens_per_second_median"
                 for p in ("full", "selective8", "selective4") for b in (1, 16, 64)
                 for part, key in (("tg", "decode"), ("pp", "prefill"))},
    # the same run with --no-pdl (every kernel in plain stream order) or --pdl-late (the
    # GEMVs trigger their successor after their main loop; the default since 2a6c2da)
    **{topic: {f"{p}_b{b}_tg_tok_s": f"results[policy={p},b={b}].decode.tokens_per_second_median"
               for p in ("full", "selective8", "selective4") for b in (1, 16, 64)}
       for topic in ("batch-8b-no-pdl", "batch-8b-pdl-late")},
    # the GGUF types' files at B = 1 / 8 / 16 (full cache, PP 512, TG 64)
    **{topic: {f"full_b{b}_{part}_tok_s": f"results[policy=full,b={b}].{key}.tokens_per_second_median"
               for b in (1, 8, 16) for part, key in (("tg", "decode"), ("pp", "prefill"))}
       for topic in ("batch-8b-q8", "batch-8b-q6k", "batch-8b-q4km", "batch-8b-q5km")},
    # the condition at B = 64 (2K prompts, 128 generated), and B 16 / 32 / 64 at 2K / 64
    "batch-8b-b64": {f"{p}_b64_{part}_tok_s": f"results[policy={p},b=64].{key}.tokens_per_second_median"
                     for p in ("full", "selective4") for part, key in (("tg", "decode"), ("pp", "prefill"))},
    "batch-8b-2k": {f"{p}_b{b}_tg_tok_s": f"results[policy={p},b={b}].decode.tokens_per_second_median"
                    for p in ("full", "selective4") for b in (16, 32, 64)},
    "batch-8b-32x8k": {f"{p}_b32_{part}_tok_s": f"results[policy={p},b=32].{key}.tokens_per_second_median"
                       for p in ("full", "selective8", "selective4")
                       for part, key in (("tg", "decode"), ("pp", "prefill"))},
    "serve-8b": {f"c{c}_{key}": f"results[concurrency={c}].{key}"
                 for c in (1, 64) for key in ("tokens_per_second", "itl_p50_ms", "itl_p99_ms", "ttft_p99_ms", "failed")},
    "kv-batch": {f"{p}_{c}_b{b}_mma_swap_pct_copy": f"rows[context={c},batch={b},policy={p},kernel=mma_swap].pct_copy"
                 for p in ("full", "selective8", "selective4", "int8", "int4") for c in (2048, 8192) for b in (16, 64)},
    "weight-only-variants": {f"g32_m{m}_{n}x{k}_production_{unit}":
                             _gemm("weight_only_variants", "w4a16 g32 zp", "production", m, n, k) + path
                             for m in (1, 16) for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
                             for unit, path in (("pct_copy", ".pct_copy"), ("x_read", ".speedup_vs_peer"))},
    "prefill": {f"{p}_{c}_mma_tflops": f"rows[context={c},policy={p},kernel=mma].tflops"
                for p in ("full", "selective8", "selective4", "int8", "int4") for c in (2048, 8192, 32768)},
    "attention": {f"{k.replace('.', '')}_{t}_d{d}_{'causal' if m else 'full'}_tflops":
                  f"rows[kernel={k},dtype={t},head_dim={d},causal={'true' if m else 'false'}].tflops"
                  for k in ("wgmma", "mma.sync") for t in ("f16", "bf16") for d in (64, 128) for m in (True, False)},
    "weight-only-wgmma": {f"{op}_m{m}_{v.replace(' ', '')}_ms":
                          _gemm("weight_only_wgmma", f"{op_name}", v, m, 28672, 8192) + ".ms"
                          for op, op_name in (("q4_1", "w4a16 g32 zp (Q4_1)"), ("q8_0", "w8a16 g32 (Q8_0)"))
                          for m in (512, 2048, 8192) for v in ("production", "wgmma split 1")},
    # batched-decode rows (M 32 / 64) at the 8B FFN shape: production against cuBLAS FP16
    "weight-only-wgmma-small-m": {f"{op}_m{m}_{v.replace(' ', '').replace('.', '')}_ms":
                                  _gemm("weight_only_wgmma", f"{op_name}", v, m, 28672, 8192) + ".ms"
                                  for op, op_name in (("q4_1", "w4a16 g32 zp (Q4_1)"), ("g128", "w4a16 g128 zp"),
                                                      ("q8_0", "w8a16 g32 (Q8_0)"), ("f16", "f16 weights"))
                                  for m in (32, 64)
                                  for v in (("cublas f16",) if op == "f16" else ("production",))},
    "python-overhead": {
        "processes": "processes",
        "cuda_quantize_over_us": _overhead("cuda", "quantize_tensor int8") + ".over_us",
        "cuda_dequantize_over_us": _overhead("cuda", "dequantize_tensor") + ".over_us",
        "cuda_int8_matmul_over_us": _overhead("cuda", "int8_matmul") + ".over_us",
        "cuda_kv_append_over_us": _overhead("cuda", "LayerKVCache.append") + ".over_us",
        "cuda_kv_attention_over_us": _overhead("cuda", "LayerKVCache.attention") + ".over_us",
        "cuda_torch_add_over_us": _overhead("cuda", "torch.add") + ".over_us",
        "numpy_quantize_floor_us": _overhead("numpy", "quantize_tensor int8") + ".floor_us",
    },
}


class RecordError(Exception):
    pass


_STEP = re.compile(r"\[([^\]]*)\]|\.?([^.\[\]]+)")
_CONDITION = re.compile(r"([^=^]+)(\^?=)(.*)")


def _matches(item, condition):
    key, op, want = _CONDITION.fullmatch(condition).groups()
    have = item.get(key.strip()) if isinstance(item, dict) else None
    if op == "^=":
        return isinstance(have, str) and have.startswith(want)
    if isinstance(have, bool):
        return want == str(have).lower()
    if isinstance(have, (int, float)):
        try:
            return float(want) == have
        except ValueError:
            return False
    return have == want


def lookup(doc, path):
    """The number at PATH in doc (see the module's doc); RecordError if there is none."""
    value, pos = doc, 0
    while pos < len(path):
        step = _STEP.match(path, pos)
        if not step:
            raise RecordError(f"path {path!r}: cannot read it from character {pos}")
        pos = step.end()
        selector, key = step.groups()
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                raise RecordError(f"path {path!r}: no key {key!r}")
            value = value[key]
        elif selector.isdigit():
            if not isinstance(value, list) or int(selector) >= len(value):
                raise RecordError(f"path {path!r}: no item [{selector}]")
            value = value[int(selector)]
        else:
            conditions = selector.split(",")
            if not all(_CONDITION.fullmatch(c) for c in conditions):
                raise RecordError(f"path {path!r}: [{selector}] is not key=value,...")
            found = [x for x in value if all(_matches(x, c) for c in conditions)] if isinstance(value, list) else []
            if not found:
                raise RecordError(f"path {path!r}: no item matches [{selector}]")
            value = found[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"path {path!r}: {value!r} is not a number")
    return value


def _figure(doc, spec):
    if isinstance(spec, tuple):  # a ratio of two paths
        return lookup(doc, spec[0]) / lookup(doc, spec[1])
    return lookup(doc, spec)


def key_figures(doc, topic, extra):
    """The topic's default figures that the JSON has, then the named paths of --figures
    (which must all resolve), rounded to 5 significant digits."""
    figures = {}
    for name, spec in DEFAULT_FIGURES.get(topic, {}).items():
        try:
            figures[name] = _figure(doc, spec)
        except (RecordError, ZeroDivisionError):
            pass
    for item in extra:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise RecordError(f"--figures {item!r}: expected NAME=PATH")
        figures[name] = lookup(doc, path)
    return {name: float(f"{v:.5g}") if isinstance(v, float) else v for name, v in figures.items()}


def write_whole(path, data):
    """Writes data to path through a temporary file beside it and os.replace, so that
    path holds either what it held before or all of data, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 is for the temporary name only
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_result(path):
    try:
        data = Path(path).read_bytes()
        doc = json.loads(data.decode("utf-8"))
    except OSError as e:
        raise RecordError(f"{path}: cannot read it ({e.strerror})")
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not valid JSON (not UTF-8 text)")
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})")
    if not isinstance(doc, dict):
        raise RecordError(f"{path}: not valid JSON for a result (expected an object, got {type(doc).__name__})")
    return data, doc


def head_commit():
    try:
        out = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise RecordError("no git commit to record: pass --commit")
    return out.stdout.strip()


def record(topic, gpu, result, results_dir, commit=None, figures=(), table=None, note=None):
    """Checks everything first, then writes the result, the table and the history line,
    each whole. Returns the history entry."""
    for what, name in (("TOPIC", topic), ("GPU", gpu)):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise RecordError(f"{what} {name!r}: use lower-case letters, digits and '-' (e.g. eval-kvcache, h100)")
    data, doc = read_result(result)
    table_data = None
    if table:
        if Path(table).suffix not in (".md", ".txt"):
            raise RecordError(f"--table {table}: expected a .md or .txt file")
        try:
            table_data = Path(table).read_bytes()
        except OSError as e:
            raise RecordError(f"{table}: cannot read it ({e.strerror})")
    entry = {
        "topic": topic,
        "commit": commit or head_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "figures": key_figures(doc, topic, figures),
        "source": f"{topic}-{gpu}.json",
    }
    if table:
        entry["also"] = [f"{topic}-{gpu}{Path(table).suffix}"]
    if note:
        entry["note"] = note
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    history = results_dir / "history.jsonl"
    old = history.read_bytes() if history.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    write_whole(results_dir / entry["source"], data)
    if table_data is not None:
        write_whole(results_dir / entry["also"][0], table_data)
    write_whole(history, old + json.dumps(entry).encode() + b"\n")
    for stale in sorted(results_dir.glob(f"{topic}-{gpu}.*")):
        if stale.suffix in (".md", ".txt") and not table:
            print(f"record.py: note: {stale.name} is an older run's table, left as it was (--table replaces it)",
                  file=sys.stderr)
    if not entry["figures"]:
        print(f"record.py: note: no key figures for topic {topic!r} (--figures NAME=PATH adds some)", file=sys.stderr)
    said = str(doc.get("commit", ""))
    if said and not (said.startswith(entry["commit"]) or entry["commit"].startswith(said)):
        print(f"record.py: note: {result} names commit {said}; recorded under {entry['commit']}", file=sys.stderr)
    return entry


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topic", help="e.g. kvquant, gemm, weight-only, eval-attention, eval-kvcache, python-overhead")
    p.add_argument("gpu", help="h100, cpu, ...")
    p.add_argument("result", help="the JSON the benchmark wrote")
    p.add_argument("--table", help="the run's table (.md / .txt), kept as <topic>-<gpu> with its suffix")
    p.add_argument("--commit", help="the commit measured (default: git rev-parse --short HEAD)")
    p.add_argument("--note", help="a caveat worth keeping with the figures (e.g. 'perplexity over 1 window')")
    p.add_argument("--figures", nargs="+", action="extend", default=[], metavar="NAME=PATH",
                   help="more key figures: NAME=PATH into the JSON")
    p.add_argument("--results-dir", default=HERE / "results", help="default: bench/results")
    args = p.parse_args(argv)
    try:
        entry = record(args.topic, args.gpu, args.result, args.results_dir, args.commit, args.figures, args.table,
                       args.note)
    except RecordError as e:
        print(f"record.py: error: {e}; nothing recorded", file=sys.stderr)
        return 1
    print(json.dumps(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
