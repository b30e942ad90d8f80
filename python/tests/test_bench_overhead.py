"""python -m lowbit.bench_overhead --processes: the rows of every process, folded into
each row's min and median (the benchmark's numbers themselves are not checked)."""
import json

from lowbit import bench_overhead
from lowbit._json import write_json


def test_rows_over_processes(tmp_path):
    out = tmp_path / "rows.json"
    assert bench_overhead.main(["--processes", "2", "--calls", "20", "--no-torch", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["processes"] == 2
    names = [row["call"] for row in report["rows"]]
    assert "quantize_tensor int8 token 4x64" in names and "np.empty 4x64" in names
    for row in report["rows"]:
        assert row["device"] == "numpy" and len(row["host_us_each"]) == 2
        assert row["host_min_us"] == min(row["host_us_each"]) <= row["host_median_us"]
        if row["floor_us"] is not None:
            assert row["over_us"] == row["host_min_us"] - row["floor_us"]


def test_json_is_written_whole_or_not_at_all(tmp_path):
    out = tmp_path / "rows.json"
    write_json(str(out), {"rows": [1, 2]})
    assert json.loads(out.read_text()) == {"rows": [1, 2]}
    try:
        write_json(str(out), {"rows": [object()]})  # fails part way through
    except TypeError:
        pass
    assert json.loads(out.read_text()) == {"rows": [1, 2]}, "the old file was damaged"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"], "a temporary file was left"
