"""kplay run --against before.json: faster, slower or the same, from both runs' medians and noise (record.same)."""

import json

import pytest

from playground.run.compare import verdict


def t(median, q1=None, q3=None, noise=0.001):
    return {"median_s": median, "q1_s": q1 or median * 0.999, "q3_s": q3 or median * 1.001, "noise": noise}


@pytest.mark.parametrize("before, after, expected", [
    (t(1.0), t(0.5), "faster"),
    (t(1.0), t(2.0), "slower"),
    (t(1.0, noise=0.05), t(0.97, noise=0.01), "same"),  # within the larger noise
    (t(1.0, 0.8, 1.2), t(0.9, 0.85, 0.95), "faster"),  # one rule, the noise's: overlapping quartiles are not it
    (t(1.0, 0.99, 1.01), t(0.9, 0.89, 0.91, noise=0.001), "faster"),
])
def test_verdict(before, after, expected):
    assert verdict(before, after) == expected


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["run", "sum", "--device", "cpu", "--n", "1e4", "--json"])
    assert result.exit_code == 0
    return json.loads(result.stdout)


def test_against_an_earlier_run_says_faster_slower_or_same(kplay, before, tmp_path):
    slow = json.loads(json.dumps(before))
    for contender in (*slow["variants"], *slow["baselines"].values()):
        for k in ("median_s", "q1_s", "q3_s"):
            contender["time"][k] *= 1000  # "before" took 1000x as long: now is faster, whatever the noise
        contender["time"]["noise"] = 0.0
    (tmp_path / "before.json").write_text(json.dumps(slow))
    result = kplay("run", "sum", "--device", "cpu", "--n", "1e4", "--against", tmp_path / "before.json")
    assert result.exit_code == 0
    rows = [line for line in result.output.splitlines() if line.startswith(("cpp ", "torch.sum "))]
    assert len(rows) == 4 and all(r.rstrip().endswith("faster") for r in rows[2:])


def test_against_with_json_puts_the_verdicts_in_the_record(kplay, before, tmp_path):
    slow = json.loads(json.dumps(before))
    for k in ("median_s", "q1_s", "q3_s"):
        slow["variants"][0]["time"][k] *= 1000
    (tmp_path / "before.json").write_text(json.dumps(slow))
    result = kplay("run", "sum", "--device", "cpu", "--n", "1e4", "--against", tmp_path / "before.json", "--json")
    against = json.loads(result.stdout)["against"]
    cpp = next(c for c in against["contenders"] if c["name"] == "cpp")
    assert cpp["verdict"] == "faster" and cpp["before_s"] == slow["variants"][0]["time"]["median_s"]
    assert against["differences"] == []


@pytest.mark.parametrize("args, says", [
    (["sum", "--n", "2e4"], "a run of n=10,000, this one is of n=20,000"),
    (["print_array", "--n", "4"], "a run of sum, this one is of print_array")])
def test_against_another_family_or_size_is_refused_before_the_run(kplay, before, tmp_path, args, says):
    (tmp_path / "before.json").write_text(json.dumps(before))
    result = kplay("run", *args, "--device", "cpu", "--against", tmp_path / "before.json")
    assert result.exit_code == 2 and says in result.stderr and "✓" not in result.output


@pytest.mark.parametrize("content, says", [(None, "no such file"), ("{", "not JSON"), ("[]", "not a kplay run record")])
def test_a_bad_before_file_is_one_line_and_exit_2(kplay, tmp_path, content, says):
    path = tmp_path / "before.json"
    if content is not None:
        path.write_text(content)
    result = kplay("run", "sum", "--device", "cpu", "--against", path)
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_against_with_no_bench_is_a_usage_error(kplay, before, tmp_path):
    (tmp_path / "before.json").write_text(json.dumps(before))
    result = kplay("run", "sum", "--device", "cpu", "--no-bench", "--against", tmp_path / "before.json")
    assert result.exit_code == 2 and "--against compares timings: it cannot go with --no-bench" in result.stderr


def test_against_a_values_run_shows_its_values_as_they_are(kplay, tmp_path):
    first = kplay("run", "print_array", "--device", "cpu", "--values", "1,2", "--json")
    (tmp_path / "before.json").write_text(first.stdout)
    result = kplay("run", "print_array", "--device", "cpu", "--values", "3,4", "--against", tmp_path / "before.json")
    assert result.exit_code == 2 and "a run of n=2 values=[1, 2]" in " ".join(result.output.split()), result.output


def test_a_run_that_only_changed_its_input_says_so_in_its_verdict():
    from playground.core.record import CHANGED, BuildInfo, Check
    from playground.core.record import RunResult, VariantResult

    def run(*messages):
        check = Check(ok=False, max_abs_err=0.0, tolerance=1.0, tolerance_source="", cases=["n=1", "n=2"],
                      failed={f"n={k}": m for k, m in enumerate(messages, 1)})
        v = VariantResult(variant="cpp", note="", build=BuildInfo(name="x", seconds=0.0, cached=True), check=check)
        return RunResult(family="sum", device="cuda", dtype="float32", seed=0, sizes={}, params={}, torch="",
                         variants=[v])

    assert run(f"input 0 {CHANGED} (it must not write its input)").why == "the kernel changed its input"
    assert run("n=1: got 3, expected 2", f"input 0 {CHANGED}").why == (
        "the output does not match the reference, and the kernel changed its input")
    assert run("n=1: got 3, expected 2").why == "the output does not match the reference"
