#!/usr/bin/env python3
"""Compares lowbit's tokenizer with Hugging Face's on a fixed set of texts, for each
model given: transformers reads the same GGUF file (AutoTokenizer.from_pretrained(dir,
gguf_file=...)), lowbit's ids come from `lowbit model tokenize`. Needs transformers and
gguf (a GPU machine's environment has them; this one may not). Prints one line per text
and exits 1 on any difference.

    python3 scripts/check_tokenizer_hf.py [--cli build/bin/lowbit] [MODEL ...]

MODEL: a fetched model's short name (default: smollm2-135m qwen2.5-0.5b) or a GGUF path."""
import argparse
import os
import pathlib
import subprocess
import sys

# Plain prose, numbers (Llama 3 groups three digits, Qwen2 and SmolLM2 split each),
# contractions in both cases, whitespace runs, tabs, CRLF, NBSP and NEL, accents, CJK,
# emoji, code, the chat format's control tokens, and bytes the vocabulary may lack (SmolLM2
# has no token for 04 06 13 14 16 1D F1 F2: both tokenizers drop them, and the rest of
# their piece merges without them; plane-5 and plane-9 characters lead with F1 and F2).
TEXTS = [
    "Hello world",
    "The year 2024 had 365 days; pi is 3.14159.",
    "multiple   spaces    here  ",
    "line one\nline two\n\n\nend\r\n",
    "I'm sure they'll say it's fine, don't you think? We've seen it. I'D WE'LL",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "Emoji: \U0001F600\U0001F44D\U0001F3FD and \u2764\uFE0F",
    "  leading\ttabs\t\tand\u00a0nbsp\u0085nel",
    "code: def f(x):\n    return x**2  # square\n\tif a != b: print(a[0], b[-1])",
    "12345678901234567890 1,234,567.89 0x1F 3e-10",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b",
    " = Robert Boulter = \n Robert Boulter is an English film , television and theatre actor .",
    "abc\x04def",
    "!\x04!",
    "a\x13b\x14c\x16d\x1de\x06",
    "x\U00050000y\U00090000z",
    "<|im_end\x04|>",
]

KNOWN = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-0.5b": "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"}


def model_file(model):
    if model in KNOWN:
        cache = os.environ.get("LOWBIT_CACHE", os.path.expanduser("~/.cache/lowbit"))
        return pathlib.Path(cache) / "models" / KNOWN[model]
    return pathlib.Path(model)


def hf_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def lowbit_ids(cli, path, text):
    out = subprocess.run([cli, "model", "tokenize", "--model", str(path), "--text", text], check=True,
                         capture_output=True, text=True).stdout.split()
    return [int(i) for i in out]


def compare(cli, model):
    """(text, hf ids, lowbit ids) for every text that differs."""
    path = model_file(model)
    tok = hf_tokenizer(path)
    differences = []
    for text in TEXTS:
        hf = tok.encode(text, add_special_tokens=False)
        ours = lowbit_ids(cli, path, text)
        print(f"{model}: {'same' if hf == ours else 'DIFFERENT'} ({len(hf)} tokens) {text[:40]!r}")
        if hf != ours:
            differences.append((text, hf, ours))
    return differences


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cli", default=os.environ.get("LOWBIT_CLI", "build/bin/lowbit"))
    parser.add_argument("models", nargs="*", default=list(KNOWN))
    args = parser.parse_args()
    failed = False
    for model in args.models:
        if not model_file(model).is_file():
            print(f"{model}: no file at {model_file(model)} (scripts/fetch-model.sh {model})")
            failed = True
            continue
        for text, hf, ours in compare(args.cli, model):
            failed = True
            print(f"  text {text!r}\n  hf     {hf}\n  lowbit {ours}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
