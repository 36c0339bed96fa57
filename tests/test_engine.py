"""Engine hooks a family may use: steps timed apart, several baselines, extra columns that can fail."""

import json

import pytest


@pytest.mark.cuda  # torch.compile's baseline: on the CPU, a C++ build of inductor's kernels (20 s cold)
def test_lltm_reports_forward_and_backward_against_two_baselines(kplay):
    result = kplay("run", "lltm", "--device", "cuda", "--variant", "cuda", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    v = r["variants"][0]
    assert set(v["timings"]) == {"forward", "backward"} and list(r["baselines"]) == ["eager", "torch.compile"]
    assert {b: set(s) for b, s in v["speedups"].items()} == {b: {"call", "forward", "backward"} for b in r["baselines"]}
    eager = r["baselines"]["eager"]  # each side on the clock that counts for it (walls, where the ops are tiny)
    ratio = eager[eager["clock"]]["forward"]["median_s"] / v[v["clock"]]["forward"]["median_s"]
    assert v["speedups"]["eager"]["forward"]["ratio"] == pytest.approx(ratio)
    assert v["speedup"] == pytest.approx(eager["time"]["median_s"] / v["time"]["median_s"])
    assert v["time"]["median_s"] == pytest.approx(sum(t["median_s"] for t in v[v["clock"]].values()))
    assert v["extra"] == {"gradcheck": "pass"}


def test_a_family_times_against_each_of_its_baselines_in_its_order(kplay, tmp_path):
    """Here, without torch.compile: a family of `kplay new` given a second baseline (BASELINES in spec.py)."""
    folder = tmp_path / "twice"
    assert kplay("new", "twice", folder).exit_code == 0
    spec, toml = folder / "spec.py", folder / "task.toml"
    text = spec.read_text().replace('BASELINE = "2 * x + 1"', "").replace("def baseline(x):", "def affine(x):")
    spec.write_text(text + "\n\nBASELINES = {'2 * x + 1': affine, 'x + x + 1': lambda x: x + x + 1}\n")
    toml.write_text(toml.read_text().replace('baselines = ["2 * x + 1"]', 'baselines = ["2 * x + 1", "x + x + 1"]'))
    result = kplay("run", folder, "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert list(r["baselines"]) == ["2 * x + 1", "x + x + 1"]
    assert set(r["variants"][0]["speedups"]) == {"2 * x + 1", "x + x + 1"}
    one = kplay("run", folder, "--device", "cpu", "--json", "--skip-baseline", "x + x + 1")
    assert list(json.loads(one.stdout)["baselines"]) == ["2 * x + 1"]


def test_skip_baseline_skips_that_baseline(kplay):
    result = kplay("run", "lltm", "--device", "cpu", "--variant", "cpp", "--skip-baseline", "torch.compile", "--json")
    assert result.exit_code == 0 and list(json.loads(result.stdout)["baselines"]) == ["eager"]


def test_an_extra_column_that_says_fail_fails_the_check(kplay, tmp_path):
    folder = tmp_path / "twice"
    assert kplay("new", "twice", folder).exit_code == 0
    with open(folder / "spec.py", "a") as f:
        f.write("\n\ndef extra(ops, variant, inputs):\n    return {'gradcheck': 'FAIL'}\n")
    result = kplay("run", folder, "--device", "cpu", "--no-bench", "--json")
    assert result.exit_code == 1
    check = json.loads(result.stdout)["variants"][0]["check"]
    assert not check["ok"] and "gradcheck: FAIL" in check["mismatches"]


@pytest.mark.parametrize("warm", [False, True])
def test_bench_takes_turns_and_a_warm_call_follows_one_of_its_own(warm):
    """Round-robin between contenders; warm: each timed call right after an untimed call of the same one."""
    from playground.run.timing import bench

    calls = []
    fns = {"a": lambda: calls.append("a"), "b": (lambda: (calls.append("prep b"),), lambda _: calls.append("b"))}
    stats = bench(fns, "cpu", budget_s=0.0, warm=warm)
    assert stats["a"].samples == stats["b"].samples >= 5
    # After the warm-up (three calls each), every turn; b's run always gets a fresh prepare().
    turn = ["a", "a", "prep b", "b", "prep b", "b"] if warm else ["a", "prep b", "b"]
    assert calls[9:] == turn * stats["a"].samples
    assert ("each call after one of its own" in stats["a"].method) == warm


@pytest.mark.parametrize("name", ["print_array", "sum", "lltm", "linear"])
def test_a_specs_reference_tolerance_and_probe_leave_the_inputs_unchanged(name):
    """At every dtype the family declares (sum's float64 tolerance once took |x| in place: the check then
    said the kernel wrote its input)."""
    import torch

    from playground.family import registry, spec

    fam = registry.find(name)
    hooks = spec.load(fam)
    for dtype in fam.dtypes:
        dt = getattr(torch, dtype)
        inputs = hooks.make_inputs({**fam.sizes, **fam.test_sizes[-1]}, dt, "cpu", torch.Generator().manual_seed(0))
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        hooks.reference(*inputs)
        hooks.tolerance(*inputs, dt)
        if hooks.probe:
            hooks.probe(inputs, dt, torch.Generator().manual_seed(1))
        for a, b in zip(before, inputs):
            assert not isinstance(a, torch.Tensor) or torch.equal(a, b), f"{name} at {dtype}"
