#!/usr/bin/env python3
"""Holds the engine tokenizer's expected ids to Hugging Face's tokenizer for the default model.

tests/data/smollm2_tokenizer_cases.tsv lists texts and their token ids; the engine's
CPU test (tests/cpu/tokenizer_test.cpp) checks lowbit's tokenizer against it, and this
script checks Hugging Face's against it: the tokenizer transformers builds from the same
GGUF file, with the pre-tokenizer of SmolLM2's tokenizer.json (digits split one by one,
then GPT-2's byte-level split), which the GGUF names "smollm" and transformers' GGUF
loader does not set.

    python3 scripts/hf-tokenizer-ids.py [--model PATH] [--cases FILE] [--write]

Exit status 1 when an id list differs (each one is printed); --write replaces the ids
with Hugging Face's instead. Needs transformers and gguf (and torch for transformers'
GGUF loader; without torch the same converter is called directly).

The cases file: one case a line, `text as UTF-8 hex <TAB> ids <TAB> the text as a JSON
string (for readers)`; '#' starts a comment line. A new case: its hex (python3 -c
'print("text".encode().hex())') and any ids, then --write.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CASES = os.path.join(ROOT, "tests", "data", "smollm2_tokenizer_cases.tsv")


def default_model_path():
    cache = os.environ.get("LOWBIT_CACHE") or os.path.expanduser("~/.cache/lowbit")
    return os.environ.get("LOWBIT_MODEL") or os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def gguf_metadata(path, keys):
    """The named metadata values of a GGUF file (strings, string arrays, integer arrays)."""
    import gguf

    reader = gguf.GGUFReader(path)
    out = {}
    for key in keys:
        field = reader.fields.get(key)
        if field is None:
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY and field.types[1] == gguf.GGUFValueType.STRING:
            out[key] = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        elif kind == gguf.GGUFValueType.ARRAY:
            out[key] = [int(field.parts[i][0]) for i in field.data]
        elif kind == gguf.GGUFValueType.STRING:
            out[key] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            out[key] = field.parts[field.data[0]][0]
    return out


def converted_without_torch(path):
    """transformers' GGUF tokenizer converter, called as AutoTokenizer would call it
    (its GGUF loader imports torch; the converter does not)."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    names = {"tokenizer.ggml.model": "tokenizer_type", "tokenizer.ggml.pre": "pre_tokenizer_type",
             "tokenizer.ggml.tokens": "tokens", "tokenizer.ggml.merges": "merges",
             "tokenizer.ggml.token_type": "token_type"}
    metadata = gguf_metadata(path, list(names) + ["general.architecture"])
    tokenizer_dict = {name: metadata[key] for key, name in names.items() if key in metadata}
    backend, _ = convert_gguf_tokenizer(metadata["general.architecture"], tokenizer_dict)
    return backend


def hf_tokenizer(path):
    """The `tokenizers.Tokenizer` Hugging Face uses for this GGUF file."""
    from tokenizers import pre_tokenizers

    try:
        import torch  # noqa: F401  (transformers' GGUF loader needs it)
        from transformers import AutoTokenizer

        folder, name = os.path.split(path)
        backend = AutoTokenizer.from_pretrained(folder, gguf_file=name).backend_tokenizer
    except ImportError:
        backend = converted_without_torch(path)
    if gguf_metadata(path, ["tokenizer.ggml.pre"]).get("tokenizer.ggml.pre") == "smollm":
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return backend


def read_cases(path):
    """[(text, ids)] of a cases file; comment lines are kept as (line, None)."""
    cases = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                cases.append((line, None))
                continue
            hex_text, ids = line.split("\t")[:2]
            cases.append((bytes.fromhex(hex_text).decode("utf-8"), [int(i) for i in ids.split()]))
    return cases


def write_cases(path, cases):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for text, ids in cases:
            if ids is None:
                f.write(text + "\n")
            else:
                f.write(f"{text.encode('utf-8').hex()}\t{' '.join(map(str, ids))}\t{json.dumps(text)}\n")
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=default_model_path())
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--write", action="store_true", help="replace the ids with Hugging Face's")
    args = parser.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"hf-tokenizer-ids: no model at {args.model} (scripts/fetch-model.sh, or --model)")
    tokenizer = hf_tokenizer(args.model)
    cases = read_cases(args.cases)
    differ = 0
    for i, (text, ids) in enumerate(cases):
        if ids is None:
            continue
        hf = tokenizer.encode(text, add_special_tokens=False).ids
        if hf != ids:
            differ += 1
            print(f"{json.dumps(text)}: file {ids}, Hugging Face {hf}")
            cases[i] = (text, hf)
    count = sum(ids is not None for _, ids in cases)
    if args.write:
        write_cases(args.cases, cases)
        print(f"hf-tokenizer-ids: {count} cases, {differ} updated in {args.cases}")
        return 0
    print(f"hf-tokenizer-ids: {count} cases, {differ} differ from Hugging Face")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
