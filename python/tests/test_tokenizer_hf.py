"""lowbit's tokenizer against Hugging Face's on scripts/check_tokenizer_hf.py's fixed text
set, for each fetched model (SmolLM2-135M, Qwen2.5-0.5B): transformers reads the same GGUF.
Skips without transformers (the GPU machine has it), the CLI or the model file."""
import importlib.util
import pathlib

import pytest
from conftest import has_module, lowbit_cli

pytestmark = pytest.mark.skipif(not (has_module("transformers") and has_module("gguf")),
                                reason="needs transformers and gguf (to load the tokenizer from the GGUF file)")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check_tokenizer_hf.py"


def check_module():
    spec = importlib.util.spec_from_file_location("check_tokenizer_hf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", ["smollm2-135m", "qwen2.5-0.5b"])
def test_ids_equal_hugging_face(model):
    check = check_module()
    cli = lowbit_cli()
    if not check.model_file(model).is_file():
        pytest.skip(f"{model} is not fetched (scripts/fetch-model.sh {model})")
    differences = check.compare(cli, model)
    assert not differences, "\n".join(f"{t!r}: hf {hf} lowbit {ours}" for t, hf, ours in differences)
