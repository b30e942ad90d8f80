"""The engine tokenizer's expected ids (tests/data/smollm2_tokenizer_cases.tsv, which the
CPU test holds lowbit's tokenizer to) are Hugging Face's: scripts/hf-tokenizer-ids.py
rebuilds them with the tokenizer transformers makes from the default model's GGUF.
Bytes the vocabulary has no token for are dropped by both, never turned into a token."""
import os
import subprocess
import sys

import pytest

from conftest import has_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_model_path():
    cache = os.environ.get("LOWBIT_CACHE") or os.path.expanduser("~/.cache/lowbit")
    path = os.environ.get("LOWBIT_MODEL") or os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.isfile(path) else None


@pytest.mark.skipif(not (has_module("transformers") and has_module("gguf") and has_module("tokenizers")),
                    reason="needs transformers, tokenizers and gguf")
@pytest.mark.skipif(default_model_path() is None, reason="needs the default model (scripts/fetch-model.sh)")
def test_engine_tokenizer_cases_are_hugging_face_ids():
    script = os.path.join(ROOT, "scripts", "hf-tokenizer-ids.py")
    run = subprocess.run([sys.executable, script, "--model", default_model_path()], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 differ from Hugging Face" in run.stdout
