"""kplay bench: size parsing, a real CPU sweep of sum (JSON, CSV, table, chart, PNG), and its failure modes."""

import copy
import csv
import json
import re
import struct
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cli import app
from playground.child import spawn as isolate
from playground.report import plot
from playground.workshop import sweep
from playground.core.errors import KernelCrash, UsageError
from playground.report.tables import short, sweep_chart, sweep_table
ENV = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
try:
    import matplotlib  # noqa: F401  (the `plot` extra)

    HAS_MATPLOTLIB = True
except ImportError:
    HAS_MATPLOTLIB = False


def invoke(*args):
    return CliRunner().invoke(app, ["bench", *map(str, args)], env=ENV)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, cache):
    """One real sweep, sum on the CPU at 1e3, 1e4, 1e5, with every output at once."""
    folder = tmp_path_factory.mktemp("bench")
    files = {"csv": folder / "sum.csv", "png": folder / "sum.png"}
    args = ["sum", "--device", "cpu", "--sizes", "1e3..1e5", "--json", "--csv", files["csv"]]
    result = invoke(*args, *(["--plot", files["png"]] if HAS_MATPLOTLIB else []))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), files


@pytest.mark.parametrize("text, sizes", [
    ("1e3,1e4,1e5", [1000, 10_000, 100_000]),
    ("1e5, 1e3,1e3", [1000, 100_000]),              # sorted, duplicates dropped
    ("4096", [4096]),
    ("1e3..1e6", [1000, 10_000, 100_000, 1_000_000]),  # a bare range: powers of ten
    ("1..16:x2", [1, 2, 4, 8, 16]),
    ("100..1000:x3", [100, 300, 900]),                # stops at the last step inside the range
    ("1e3..1e3", [1000]),
    ("10_000..1e5:x10", [10_000, 100_000]),
    ("2.5e5..1e6:x2", [250_000, 500_000, 1_000_000]),
])
def test_sizes_parse(text, sizes):
    assert sweep.parse_sizes(text) == sizes


@pytest.mark.parametrize("args, message", [
    (["--sizes", "abc"], "--sizes abc: not a number"),
    (["--sizes", "0,10"], "--sizes 0: must be at least 1"),
    (["--sizes", "1e5..1e3"], "the range must go up"),
    (["--sizes", "1e3..1e6:x1"], "the step must be a factor above 1"),
    (["--sizes", "1e3..1e6:xy"], "the step xy is not a number"),
    (["--sizes", "1e3.."], "expected FIRST..LAST"),
    (["--sizes", "1e3..1e6:2"], "expected FIRST..LAST"),
    (["--sizes", "1e3...1e6"], "expected FIRST..LAST"),
    (["--sizes", "1e3..1e6:x"], "the step x is not a number"),
    (["--sizes", "1..1e12:x1.01"], "at most 64"),
    (["--sizes", ","], "give a list"),
    (["--over", "batch"], "sum has no size 'batch'"),
    (["--tie", "n"], "that is the swept size itself"),
    (["--size", "n=5"], "n is swept"),
    (["--variant", "nope", "--device", "cpu"], "no cpu variant 'nope'"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = invoke("sum", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_a_family_without_timing_has_nothing_to_sweep():
    result = invoke("print_array", "--device", "cpu")
    assert result.exit_code == 2 and "not timed" in result.stderr


def test_default_sizes_follow_the_family_default():
    assert sweep.default_sizes(10_000_000) == [10**k for k in range(3, 9)]  # sum: cache-resident to memory-bound
    assert sweep.default_sizes(16) == [1, 2, 4, 8, 16, 32, 64]                 # lltm's batch


def test_bench_table_in_task_toml_sets_size_tie_and_range(tmp_path):
    (tmp_path / "task.toml").write_text('[sizes]\nbatch = 8\nin = 4\nout = 4\n[bench]\nsize = "in"\nsizes = "2..8:x2"\ntie = ["out"]\n')
    from playground.family.registry import load_family

    fam = load_family(tmp_path)
    assert sweep.settings(fam) == sweep.Sweep("in", ("out",), (2, 4, 8))
    assert sweep.settings(fam, over="batch") == sweep.Sweep("batch", (), (1, 2, 4, 8, 16, 32))  # the table's own size only
    assert sweep.settings(fam, sizes="3", tie=[]) == sweep.Sweep("in", (), (3,))


def test_json_is_one_run_record_per_size(swept):
    records, _ = swept
    assert [r["sizes"]["n"] for r in records] == [1000, 10_000, 100_000]
    for r in records:
        v = r["variants"][0]
        assert r["ok"] and r["family"] == "sum" and r["device"] == "cpu" and v["variant"] == "cpp"
        n = r["sizes"]["n"]
        assert v["check"]["cases"][-6:] == [f"n={n} randn", *(f"n={n} randn {form}" for form in (
            "2-D", "strided", "misaligned")), f"n={n} uniform probed", f"n={n} randn reused"]
        assert v["time"]["samples"] >= 30
        assert v["gbps"] == pytest.approx(r["sizes"]["n"] * 4 / v["time"]["median_s"] / 1e9)
        assert v["speedup"] == pytest.approx(r["baselines"]["torch.sum"]["time"]["median_s"] / v["time"]["median_s"])


def test_csv_has_a_row_per_size_and_variant(swept):
    records, files = swept
    rows = list(csv.DictReader(files["csv"].open()))
    assert [(r["n"], r["variant"]) for r in rows] == [(n, v) for n in ("1000", "10000", "100000") for v in ("cpp", "torch.sum")]
    for row, record in zip(rows[::2], records):
        assert row["check"] == "PASS" and row["family"] == "sum" and row["dtype"] == "float32"
        assert float(row["median_s"]) == pytest.approx(record["variants"][0]["time"]["median_s"])
        assert float(row["gbps"]) == pytest.approx(int(row["n"]) * 4 / float(row["median_s"]) / 1e9)
    assert all(float(r["speedup"]) == 1.0 for r in rows[1::2])


def test_png_is_written(swept):
    pytest.importorskip("matplotlib")
    png = swept[1]["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 600 and height >= 400


def test_table_and_chart_show_every_size_and_variant(swept):
    records, _ = swept
    console = Console(width=120, record=True, color_system=None)
    console.print(sweep_table(records, "n"), sweep_chart(records, "n"))
    text = console.export_text()
    assert "100,000" in text and "PASS" in text and "torch.sum" in text and "GB/s" in text
    chart = [line for line in text.splitlines() if line.startswith(("cpp", "torch.sum"))]
    assert len(chart) == 2 and all("█" in line or "▁" in line for line in chart)
    assert [short(n) for n in (1000, 2048, 250_000, 7)] == ["1e3", "2048", "2.5e5", "7"]


def test_terminal_output_through_the_cli(swept, monkeypatch):
    replay = iter(swept[0])
    monkeypatch.setattr(isolate, "run", lambda request, on_event: next(replay))
    result = invoke("sum", "--device", "cpu", "--sizes", "1e3..1e5")
    assert result.exit_code == 0, result.output
    assert "n swept" in result.stdout and "GB/s against n" in result.stdout and "best" in result.stdout


def fake_points(records, monkeypatch, fail_at: int, error: Exception):
    """isolate.run replaying real records, raising `error` at point `fail_at`."""
    calls = []

    def run(request, on_event):
        calls.append(request)
        if len(calls) - 1 == fail_at:
            raise error
        return copy.deepcopy(records[len(calls) - 1])

    monkeypatch.setattr(isolate, "run", run)
    return calls


def test_a_point_out_of_memory_is_skipped_and_the_sweep_goes_on(swept, monkeypatch):
    calls = fake_points(swept[0], monkeypatch, 1, UsageError("not enough memory for the inputs at {'n': 10000}"))
    result = invoke("sum", "--device", "cpu", "--sizes", "1e3..1e5", "--json")
    assert result.exit_code == 0 and len(calls) == 3
    records = json.loads(result.stdout)
    assert "not enough memory" in records[1]["skipped"] and records[2]["ok"]
    fake_points(swept[0], monkeypatch, 1, KernelCrash("kernel crashed: killed (out of memory?) while timing"))
    table = invoke("sum", "--device", "cpu", "--sizes", "1e3..1e5")
    assert table.exit_code == 0 and "n=10,000 skipped: kernel crashed: killed (out of memory?)" in table.stdout


def test_a_crash_stops_the_sweep_with_exit_4_and_keeps_what_was_measured(swept, monkeypatch):
    calls = fake_points(swept[0], monkeypatch, 1, KernelCrash("kernel crashed: segmentation fault while checking cpp at n=33"))
    result = invoke("sum", "--device", "cpu", "--sizes", "1e3..1e5", "--json")
    assert result.exit_code == 4 and len(calls) == 2
    assert "segmentation fault" in result.stderr and len(json.loads(result.stdout)) == 1


def test_a_failed_check_gives_exit_1(swept, monkeypatch):
    bad = copy.deepcopy(swept[0])
    bad[2]["ok"] = False
    bad[2]["variants"][0]["check"]["ok"] = False
    fake_points(bad, monkeypatch, -1, None)
    result = invoke("sum", "--device", "cpu", "--sizes", "1e3..1e5")
    assert result.exit_code == 1 and "FAIL" in result.stdout


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    result = invoke("sum", "--device", "cpu", "--sizes", "1e3", "--plot", tmp_path / "x.png")
    assert result.exit_code == 2 and f"error: --plot needs matplotlib: {sys.executable} -m pip install matplotlib" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()
    with pytest.raises(UsageError, match=re.escape(f"{sys.executable} -m pip install matplotlib")):
        plot.require()
