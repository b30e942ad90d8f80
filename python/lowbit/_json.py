"""JSON files the benchmarks write, whole or not at all."""
from __future__ import annotations

import json
import os


def write_json(path, value) -> None:
    """`value` as JSON in `path`, whole or not at all: written to a temporary file beside
    it, flushed to disk, then renamed over it. A path that is not a regular file (a
    device such as /dev/stdout, a pipe) is written in place: a rename would replace it."""
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w") as f:
            json.dump(value, f, indent=1)
        return
    temp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(temp, "w") as f:
            json.dump(value, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
