#!/usr/bin/env python3
"""Writes a GGUF file that holds only a model's tokenizer (its tokenizer.* keys, no
tensors): what `lowbit model synth --tokenizer-from FILE` reads, 1.8 MB for the default
model against 16 MB for the smallest synthesized model, so that a GPU lease's carry (64
MiB a call) keeps room for other things.

    python3 scripts/tokenizer_gguf.py SOURCE.gguf OUT.gguf

Needs the `gguf` package (PyPI). OUT is written whole (a temporary file, then renamed).
"""
import os
import sys

import gguf


def copy_tokenizer(source: str, out: str) -> None:
    reader = gguf.GGUFReader(source)
    tmp = out + ".tmp"
    writer = gguf.GGUFWriter(tmp, arch="llama")
    keys = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        keys += 1
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            if field.types[1] == gguf.GGUFValueType.STRING:
                writer.add_array(key, [bytes(field.parts[i]) for i in field.data])
            else:
                writer.add_array(key, [field.parts[i][0].item() for i in field.data])
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(key, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(key, field.parts[field.data[0]][0].item(), kind)
    if keys == 0:
        sys.exit(f"tokenizer_gguf: {source} has no tokenizer.* keys")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: tokenizer_gguf.py SOURCE.gguf OUT.gguf")
    try:
        copy_tokenizer(sys.argv[1], sys.argv[2])
    except (OSError, ValueError) as error:
        if os.path.exists(sys.argv[2] + ".tmp"):
            os.remove(sys.argv[2] + ".tmp")
        sys.exit(f"tokenizer_gguf: {error}")
