"""task.toml is checked like spec.py: every key known and of its type, every listed file there, no size named
like an option, the baselines the same in task.toml and spec.py; each mistake one line, exit 2, before torch."""

import json
import shutil

import pytest

from conftest import ROOT, WRONG
from playground.family import registry, request, spec
from playground.core.errors import UsageError
from playground.workshop.scaffold import eject, new

FOLDERS = sorted(p.parent for p in [*(ROOT / "snippets").glob("*/task.toml"), *WRONG.glob("*/task.toml")])


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_built_in_and_known_wrong_family_passes_the_schema_and_its_spec_agrees(folder):
    fam = registry.load_family(folder)
    assert list(spec.load(fam).baselines) == list(fam.baselines)


def test_an_ejected_family_and_a_new_one_pass_the_schema(tmp_path):
    """An ejected family keeps what each variant takes and is built for (a 16-bit rung ejected without its
    dtypes was checked in float32, which it refuses: on torch 2.11, a crash), and what its check draws."""
    kept = lambda f: ({n: (v.dtypes, v.math, v.arch) for n, v in f.variants.items()},  # noqa: E731
                      f.distributions, f.size_draw)
    for fam in registry.families().values():
        eject(fam, tmp_path / fam.name, list(fam.variants.values()), fam.parse_params([]))
        again = registry.load_family(tmp_path / fam.name)
        assert again.baselines == fam.baselines and kept(again) == kept(fam)
    new("twice", tmp_path / "twice")
    assert registry.load_family(tmp_path / "twice").baselines == ("2 * x + 1",)


def edges(values: set[int]) -> list[int]:
    """The powers of two in values that are multiples of 256 (so of 64 too) with both neighbours there."""
    return [v for v in values if v % 256 == 0 and v & (v - 1) == 0 and {v - 1, v + 1} <= values]


@pytest.mark.parametrize("fam", [*registry.families().values(), None], ids=lambda f: f.name if f else "new")
def test_every_size_is_checked_at_a_multiple_of_256_a_power_of_two_and_either_side(fam, tmp_path):
    """The defaults (1e7, ...) are multiples of 64: a kernel wrong only there must meet one in the test sizes."""
    if fam is None:
        new("fresh", tmp_path / "fresh")
        fam = registry.load_family(tmp_path / "fresh")
    for size, default in fam.sizes.items():
        values = {t.get(size, default) for t in fam.test_sizes}
        assert edges(values), f"{fam.name}'s test sizes give {size} {sorted(values)}"


def sum_copy(tmp_path, old: str, new_text: str):
    """A copy of sum whose task.toml has `old` replaced by `new_text`."""
    folder = tmp_path / "mysum"
    shutil.copytree(ROOT / "snippets" / "sum", folder, ignore=shutil.ignore_patterns("__pycache__"))
    toml = folder / "task.toml"
    assert toml.read_text().count(old) == 1, old
    toml.write_text(toml.read_text().replace(old, new_text))
    return folder


CPP = '[variants.cpp]\ndevice = "cpu"\nsources = ["sum.cpp"]'


@pytest.mark.parametrize("old, new_text, says", [
    ('sources = ["sum.cpp"]', 'source = ["sum.cpp"]', "[variants.cpp] unknown key 'source'; did you mean 'sources'?"),
    ("exercise = true", "exercize = true", "unknown key 'exercize'; did you mean 'exercise'?"),
    ('n = { default', 'n = { defualt = 1, default', "[sizes] n: unknown key 'defualt'; did you mean 'default'?"),
    ("default = 256", "default = 256\nchoice = [64]", "[params.threads] unknown key 'choice'; did you mean 'choices'?"),
    ("[[test_sizes]]\nn = 1\n", "[[test_sizes]]\nm = 1\n", "[[test_sizes]] #1: unknown key 'm'; known: n"),
    ('sources = ["sum.cpp"]', 'sources = "sum.cpp"', '[variants.cpp] sources = "sum.cpp": expected a list of strings'),
    ('dtypes = ["float32", "float64"]', 'dtypes = "float32"', 'dtypes = "float32": expected a list of strings'),
    ('dtypes = ["float32", "float64"]', 'dtypes = ["float23"]', "dtypes: unknown dtype 'float23'; did you mean 'float32'?"),
    ('n = { default = 10_000_000,', 'n = { default = 1e7,', "[sizes] n: default = 10000000.0: expected an integer"),
    ('device = "cpu"', 'device = "gpu"', '[variants.cpp] device = "gpu": expected cpu, cuda or any'),
    ('device = "cpu"', 'device = "cpu"\nmath = "fp16"', '[variants.cpp] math = "fp16": expected tf32'),
    ("exercise = true", 'exercise = "yes"', 'exercise = "yes": expected true, false or a table'),
    ("exercise = true", 'default_variant = "fastest"', 'default_variant = "fastest": not a variant; did you mean \'fast\'?'),
    ('baselines = ["torch.sum"]', 'baselines = "torch.sum"', 'baselines = "torch.sum": expected a list of strings'),
    ('forms = ["2-D",', 'forms = ["2D",', "forms: unknown form '2D'; did you mean '2-D'?"),
])
def test_a_task_toml_mistake_is_one_line_naming_the_file_and_the_key(kplay, tmp_path, old, new_text, says):
    folder = sum_copy(tmp_path, old, new_text)
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"error: {folder / 'task.toml'}: {says}"]


@pytest.mark.parametrize("old, new_text, says", [
    ('sources = ["sum.cpp"]', 'sources = ["summ.cpp"]', "source {folder}/summ.cpp (task.toml sources)"),
    ('includes = ["ladder.cuh"]\nnote = "textbook', 'includes = ["ladder.h"]\nnote = "textbook',
     "header {folder}/ladder.h (task.toml includes)"),
])
def test_a_listed_file_that_does_not_exist_is_named(kplay, tmp_path, old, new_text, says):
    folder = sum_copy(tmp_path, old, new_text)
    result = kplay("run", folder, "--device", "cpu", "--no-bench")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert says.format(folder=folder) + " does not exist" in result.stderr


def test_baselines_that_task_toml_and_spec_py_name_differently_are_refused(tmp_path):
    folder = sum_copy(tmp_path, 'baselines = ["torch.sum"]', 'baselines = ["torch.sum", "cub"]')
    with pytest.raises(UsageError) as e:
        spec.load(registry.load_family(folder))
    assert str(e.value) == ('mysum: task.toml declares baselines = ["torch.sum", "cub"] but spec.py binds ["torch.sum"]: '
                            "name the same baselines in both")


def test_a_variant_with_its_own_math_needs_a_tolerance_that_takes_it(tmp_path):
    """math = "tf32" asks spec.py's tolerance for TF32's bound: sum's tolerance has no math=, so it is refused."""
    folder = sum_copy(tmp_path, 'device = "cpu"', 'device = "cpu"\nmath = "tf32"')
    with pytest.raises(UsageError) as e:
        spec.load(registry.load_family(folder))
    assert str(e.value) == "mysum: cpp sets math in task.toml, so spec.py's tolerance must take math="


def family(root, name: str, sizes: str = "n = 10", extra: str = "") -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "task.toml").write_text(f'summary = "{name}"\n{extra}[sizes]\n{sizes}\n[variants.py]\ndevice = "any"\n')


def test_list_warns_of_a_refused_or_clashing_family_and_lists_the_rest(kplay, tmp_path):
    family(tmp_path, "good")
    family(tmp_path, "clashing", sizes="against = 10")
    family(tmp_path, "broken", extra='varients = "cpp"\n')
    result = kplay("list", "--path", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    listed = [f["name"] for f in json.loads(result.stdout)]
    assert {"good", "clashing", "sum", "lltm"} <= set(listed) and "broken" not in listed
    warnings = result.stderr.strip().splitlines()
    assert warnings == [
        f"warning: {tmp_path / 'broken' / 'task.toml'}: unknown key 'varients'; did you mean 'variants'? (not listed)",
        f"warning: {tmp_path / 'clashing' / 'task.toml'}: the size 'against' has the name of one of kplay's own "
        "options (--against); rename it in [sizes]"]
    run = kplay("run", tmp_path / "clashing", "--against", "x.json")
    assert run.exit_code == 2 and "the size 'against'" in run.stderr  # refused, not swallowed by --against


def test_a_refused_family_elsewhere_does_not_stop_a_lookup(kplay, tmp_path):
    family(tmp_path, "broken", extra='sumary = "typo"\n')
    result = kplay("run", "summ", "--path", tmp_path)
    assert result.exit_code == 2 and "unknown kernel 'summ'; did you mean 'sum'?" in result.stderr
    direct = kplay("run", "broken", "--path", tmp_path)
    assert direct.exit_code == 2 and "unknown key 'sumary'; did you mean 'summary'?" in direct.stderr


def test_a_param_may_take_any_name_since_it_is_given_as_param_name_value(kplay, tmp_path):
    family(tmp_path, "seeded", extra="")
    toml = tmp_path / "seeded" / "task.toml"
    toml.write_text(toml.read_text() + "[params.seed]\ndefault = 1\n")
    req = request.make(str(tmp_path / "seeded"), params=["seed=5"], seed=7, options={"seed", "param"})
    assert req.params == {"seed": 5} and req.seed == 7
    listed = kplay("list", "--path", tmp_path)
    assert listed.exit_code == 0 and not listed.stderr
