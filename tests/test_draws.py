"""What a check draws from its seed: sizes a kernel cannot list, data it cannot recognise, a fresh seed per grade."""

import json

import pytest
import torch

from playground.core.errors import UsageError
from playground.family import data, registry


@pytest.mark.parametrize("seed", range(20))
def test_drawn_sizes_are_in_range_never_a_multiple_of_32_and_odd_in_more_dimensions(seed):
    one = data.drawn_sizes({"n": 10_000_000}, {}, seed)
    assert len(one) == 3 and all(c["n"] % 32 for c in one)
    assert all(2 <= c["n"] <= 65_537 for c in one[:2]) and 1_000_000 <= one[2]["n"] <= 10_000_000
    three = data.drawn_sizes({"batch": 1024, "in": 1024, "out": 1024}, {"batch": (1, 300)}, seed)
    assert all(v % 2 for c in three for v in c.values())
    assert all(c["batch"] <= 300 and c["in"] <= 1024 for c in three[:2]) and all(v >= 103 for v in three[2].values())
    assert data.drawn_sizes({"n": 10_000_000}, {}, seed) == one  # the same seed, the same sizes


def test_drawn_sizes_take_no_case_twice_and_fewer_where_the_range_is_too_small():
    taken = [{"n": k} for k in (1, 2, 3, 4, 5)]
    drawn = data.drawn_sizes({"n": 8}, {}, 0, taken)
    assert sorted(c["n"] for c in drawn) == [6, 7]  # what is left of [2, 8] beside the taken and the requested
    assert data.drawn_sizes({"n": 1}, {}, 0) == []  # n = 1: nothing else to draw


def test_every_distribution_is_taken_before_any_repeats_and_the_seed_sets_the_order():
    names = list(data.DISTRIBUTIONS)
    first = data.assign(13, names, 0)
    assert sorted(first[:6]) == sorted(names) and first == data.assign(13, names, 0) != data.assign(13, names, 1)


@pytest.mark.parametrize("name", list(data.DISTRIBUTIONS))
def test_each_distribution_is_what_it_says(name):
    x = data.draw(name, (100_000,), torch.float32, torch.Generator().manual_seed(0))
    _, mean = data.DISTRIBUTIONS[name]
    assert x.dtype == torch.float32 and x.shape == (100_000,)
    assert (abs(x.mean().item()) > 0.5 * x.square().mean().sqrt().item()) == mean  # the probe's: a skipped element costs its mean
    expect = {"uniform": (0 <= x).all() and (x < 1).all(), "ones": (x == 1).all(),
              "integers": (x == x.round()).all() and x.abs().max() <= 8,
              "magnitudes": x.abs().min() >= 1e-3 * 0.99 and x.abs().max() <= 1e3 * 1.01 and (x < 0).any()}
    assert expect.get(name, True)


def test_an_unknown_distribution_is_refused_when_the_family_loads_with_the_valid_names(tmp_path):
    import shutil

    from conftest import ROOT

    shutil.copytree(ROOT / "snippets" / "sum", tmp_path / "sum")
    toml = tmp_path / "sum" / "task.toml"
    toml.write_text(toml.read_text().replace('"randn+3"', '"gaussian"'))
    with pytest.raises(UsageError, match="unknown distribution 'gaussian'; valid: randn, uniform, randn\\+3"):
        registry.load_family(tmp_path / "sum")


def test_the_checked_at_line_and_the_record_name_the_drawn_sizes_and_the_data(kplay):
    result = kplay("run", "sum", "--device", "cpu", "--n", "1e5", "--no-bench", "--seed", "4", "--json")
    cases = json.loads(result.stdout)["variants"][0]["check"]["cases"]
    fixed = {f"n={c['n']}" for c in registry.find("sum").test_sizes}
    drawn = [c for c in cases if c.split()[0] not in fixed and not c.startswith("n=100000 ")]
    assert len(drawn) == 3 and all(c.split()[1] in data.DISTRIBUTIONS for c in drawn), cases
    assert {c.split()[1] for c in cases if len(c.split()) > 1} >= set(registry.find("sum").distributions)
    assert "n=100000 uniform probed" in cases  # the probe's data has a non-zero mean
    shown = " ".join(kplay("run", "sum", "--device", "cpu", "--n", "1e5", "--no-bench", "--seed", "4").output.split())
    assert all(c.split()[0] in shown for c in drawn) and "uniform probed" in shown


@pytest.mark.slow  # -m "not slow": the drawn sizes' test above
def test_a_check_draws_a_fresh_seed_says_it_and_grades_the_same_with_it(kplay, tmp_path):
    assert kplay("start", "print_array/cpp", tmp_path / "me").exit_code == 0  # no timing: the quickest check
    assert kplay("eject", "print_array", tmp_path / "solution", "--variant", "cpp", "--solution").exit_code == 0
    (tmp_path / "me" / "print_array.cpp").write_text((tmp_path / "solution" / "print_array.cpp").read_text())
    first = json.loads(kplay("check", tmp_path / "me", "--json").stdout)
    shown = kplay("check", tmp_path / "me").output
    seed = int(shown.split("drawn at seed ")[1].split()[0])
    assert seed != first["seed"] and f"drawn at seed {seed} (--seed {seed} grades the same)" in shown
    again = json.loads(kplay("check", tmp_path / "me", "--json", "--seed", first["seed"]).stdout)
    cases = [[d["run"]["variants"][0]["check"]["cases"] for d in r["dtypes"][1:]] for r in (first, again)]
    assert again["seed"] == first["seed"] and cases[0] == cases[1] != []
