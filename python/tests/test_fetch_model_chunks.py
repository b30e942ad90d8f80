"""scripts/join_model_chunks.py (scripts/fetch-model.sh qwen2.5-0.5b): a model shipped as
chunks in several wheels is joined only when every chunk is there, in order and intact;
otherwise the error names the chunk and what is wrong. Small fake wheels and manifest."""
import hashlib
import json
import pathlib
import subprocess
import sys
import zipfile

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "join_model_chunks.py"
CHUNKS = [b"GGUF" + bytes(range(60)), bytes(range(200, 256)) * 3, b"tail-bytes"]


def make(tmp_path, contents=CHUNKS, members=None, skip=()):
    """Wheels fake_partN-1.0-py3-none-any.whl holding fake_partN/data/partN.bin, and the
    manifest of the true chunks."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for n, data in enumerate(contents, 1):
        if n in skip:
            continue
        member = (members or {}).get(n, f"fake_part{n}/data/part{n}.bin")
        with zipfile.ZipFile(wheels / f"fake_part{n}-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(f"fake_part{n}/__init__.py", "")
            z.writestr(member, data)
    manifest = {
        "bytes": sum(map(len, CHUNKS)),
        "sha256": hashlib.sha256(b"".join(CHUNKS)).hexdigest(),
        "chunks": [{"wheel": f"fake_part{n}-1.0-*.whl", "member": f"fake_part{n}/data/part{n}.bin",
                    "bytes": len(c), "sha256": hashlib.sha256(c).hexdigest()} for n, c in enumerate(CHUNKS, 1)],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return wheels


def join(tmp_path, wheels):
    out = tmp_path / "model.gguf"
    result = subprocess.run([sys.executable, str(SCRIPT), "fake", str(wheels), str(out),
                             f"--manifest={tmp_path / 'manifest.json'}"], capture_output=True, text=True)
    return result, out


def test_joins_the_chunks_in_order(tmp_path):
    result, out = join(tmp_path, make(tmp_path))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == b"".join(CHUNKS)


@pytest.mark.parametrize("case, message", [
    ("missing", "chunk 2 is missing: no wheel fake_part2-1.0-*.whl"),
    ("swapped", "chunk 2 holds the bytes of chunk 3: the chunks are out of order"),
    ("corrupt", "chunk 3 (fake_part3/data/part3.bin): SHA-256"),
    ("no_member", "chunk 1: the wheel fake_part1-1.0-py3-none-any.whl has no fake_part1/data/part1.bin "
                  "(it holds fake_part1/data/part9.bin)"),
])
def test_refuses_with_the_chunk_named(tmp_path, case, message):
    if case == "missing":
        wheels = make(tmp_path, skip={2})
    elif case == "swapped":
        wheels = make(tmp_path, contents=[CHUNKS[0], CHUNKS[2], CHUNKS[1]])
    elif case == "corrupt":
        wheels = make(tmp_path, contents=[CHUNKS[0], CHUNKS[1], b"tail-bytez"])
    else:
        wheels = make(tmp_path, members={1: "fake_part1/data/part9.bin"})
    result, _ = join(tmp_path, wheels)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr


def test_unknown_model(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "llama-9000", str(tmp_path), str(tmp_path / "x")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown model 'llama-9000' (known: qwen2.5-0.5b)" in result.stderr
