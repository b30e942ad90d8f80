"""bench/record.py: a result is copied whole to <topic>-<gpu>.json and one history line
is appended; a bad input fails with a clear message and changes nothing."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

RECORD = Path(__file__).resolve().parents[2] / "bench" / "record.py"

# The shape `lowbit eval kvcache --json` writes, cut to what the default figures read.
KV = {
    "benchmark": "eval_kvcache",
    "commit": "abc1234",
    "speed_prompt_tokens": 2048,
    "rows": [
        {"policy": "full", "ppl": 30.0827, "tokens_scored": 4088, "decode_tokens_per_s": 1074.48,
         "decode_tokens_per_s_long_prompt": 1034.827452, "prefill_seconds_long_prompt": 0.0403,
         "kv_ratio_vs_full": 1},
        {"policy": "selective8", "ppl": 30.0884, "tokens_scored": 4088, "decode_tokens_per_s": 1127.1,
         "decode_tokens_per_s_long_prompt": 1002.763148, "prefill_seconds_long_prompt": 0.0448,
         "kv_ratio_vs_full": 0.5213012695},
    ],
}


def run(*args):
    return subprocess.run([sys.executable, str(RECORD), *map(str, args)], capture_output=True, text=True)


def test_records_the_result_and_one_history_line(tmp_path):
    result = tmp_path / "kv.json"
    result.write_text(json.dumps(KV, indent=1))
    table = tmp_path / "kv.md"
    table.write_text("| policy | ppl |\n")
    results = tmp_path / "results"
    done = run("eval-kvcache", "h100", result, "--commit", "abc1234", "--results-dir", results,
               "--table", table, "--figures", "ppl_of_full=rows[policy=full].ppl")
    assert done.returncode == 0, done.stderr
    assert (results / "eval-kvcache-h100.json").read_bytes() == result.read_bytes()
    assert (results / "eval-kvcache-h100.md").read_bytes() == table.read_bytes()
    [line] = (results / "history.jsonl").read_text().splitlines()
    entry = json.loads(line)
    assert entry["topic"] == "eval-kvcache" and entry["gpu"] == "h100" and entry["commit"] == "abc1234"
    assert entry["date"].startswith("20") and entry["source"] == "eval-kvcache-h100.json"
    assert entry["also"] == ["eval-kvcache-h100.md"]
    figures = entry["figures"]
    assert figures["full_decode_tok_s_long_prompt"] == 1034.8
    assert figures["selective_int8_x_full"] == 0.96901  # 1002.76 / 1034.83, 5 digits
    assert figures["selective_int8_kv_x_full"] == 0.5213 and figures["ppl_of_full"] == 30.083
    assert "selective_int4_ppl" not in figures  # no such row: the default is skipped

    # A second run replaces the result and appends a line after the first.
    assert run("eval-kvcache", "h100", result, "--commit", "def5678", "--results-dir", results).returncode == 0
    assert [json.loads(x)["commit"] for x in (results / "history.jsonl").read_text().splitlines()] == \
        ["abc1234", "def5678"]


@pytest.mark.parametrize("text, extra, message", [
    ('{"rows": [', [], "not valid JSON (Expecting value at line 1, column 11)"),
    ("[1, 2]", [], "expected an object"),
    (json.dumps(KV), ["--figures", "x=rows[policy=int4].ppl"], "no item matches [policy=int4]"),
])
def test_a_bad_input_fails_and_writes_nothing(tmp_path, text, extra, message):
    result = tmp_path / "bad.json"
    result.write_text(text)
    results = tmp_path / "results"
    results.mkdir()
    (results / "eval-kvcache-h100.json").write_text("old result")
    (results / "history.jsonl").write_text('{"old": "line"}\n')
    before = {p.name: p.read_bytes() for p in results.iterdir()}

    done = run("eval-kvcache", "h100", result, "--commit", "abc1234", "--results-dir", results, *extra)
    assert done.returncode == 1
    assert message in done.stderr and "nothing recorded" in done.stderr
    assert {p.name: p.read_bytes() for p in results.iterdir()} == before  # no temporary file left either
