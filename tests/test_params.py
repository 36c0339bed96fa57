"""Parameters per variant ([variants.NAME.params]) beside the family's, and constraints over them: parsed, applied,
shown and refused without torch and without a build; the rule language is a small one, never eval'd."""

import re

import pytest

from playground.core.errors import UsageError
from playground.family import constraints, registry, render, request
from playground.report import tables as report

TASK = """
dtypes = ["float32"]
[sizes]
n = 1000
[params.threads]
default = 256
choices = [128, 256]
help = "threads per block"

[variants.wide]
device = "cuda"
sources = ["wide.cu"]
[variants.wide.params]
block = { default = 64, choices = [32, 64, 128], help = "outputs per block" }
rows = { default = 4, choices = [2, 4, 8], help = "outputs per thread" }
[[variants.wide.constraints]]
rule = "block * rows <= threads and block % rows == 0"
why = "a block's outputs are at most its threads"

[variants.narrow]
device = "cuda"
sources = ["narrow.cu"]
[variants.narrow.params]
block = { default = 32, choices = [16, 32], help = "outputs per block" }

[variants.plain]
device = "cpu"
sources = ["plain.cpp"]
"""


@pytest.fixture
def tiles(tmp_path):
    """A family of three variants: two with a `block` of their own (different choices), one with none."""
    folder = tmp_path / "tiles"
    folder.mkdir()
    (folder / "task.toml").write_text(TASK)
    (folder / "wide.cu").write_text("constexpr int B = {{block}}, R = {{rows}}, T = {{threads}};\n")
    (folder / "narrow.cu").write_text("constexpr int B = {{block}}, T = {{threads}};\n")
    (folder / "plain.cpp").write_text("int x;\n")
    (folder / "spec.py").write_text("")  # eject copies it; nothing here imports it
    return registry.load_family(folder)


def test_a_variant_renders_its_own_params_its_defaults_filled_in(tiles):
    given = tiles.parse_params(["block=32"], [tiles.variants["wide"]])
    assert given == {"threads": 256, "block": 32}  # the family's, defaults in; the variant's own as given
    assert render.sources(tiles, tiles.variants["wide"], given)["wide.cu"] == "constexpr int B = 32, R = 4, T = 256;\n"
    assert render.sources(tiles, tiles.variants["narrow"], {})["narrow.cu"] == "constexpr int B = 32, T = 256;\n"


def test_a_param_applies_to_every_chosen_variant_that_declares_it_and_each_must_take_it(tiles):
    both = list(tiles.variants.values())
    req = request.make(str(tiles.path), device="cuda", variant="all", params=["block=32"])
    assert [tiles.params_for(v, req.params).get("block") for v in both] == [32, 32, None]
    with pytest.raises(UsageError, match=r"--param block=128 \(narrow's\): valid values are 16, 32"):
        tiles.parse_params(["block=128"], both)
    assert tiles.parse_params(["block=128", "rows=2"], [tiles.variants["wide"]])["block"] == 128  # narrow not chosen


def test_a_param_no_chosen_variant_declares_is_refused_in_one_line(tiles):
    with pytest.raises(UsageError, match=r"^--param rows: narrow has no such parameter; it is a parameter of wide "
                                         r"\(pick one with --variant\)$"):
        request.make(str(tiles.path), device="cuda", variant="narrow", params=["rows=2"])
    with pytest.raises(UsageError, match="^tiles has no parameter 'cols'; valid: threads, block, rows$"):
        request.make(str(tiles.path), device="cuda", variant="all", params=["cols=2"])
    with pytest.raises(UsageError, match="plain has no such parameter; it is a parameter of wide, narrow"):
        request.make(str(tiles.path), device="cpu", params=["block=32"])  # the CPU's default variant


def test_a_combination_the_constraints_refuse_names_the_part_that_fails(tiles):
    with pytest.raises(UsageError) as refused:
        request.make(str(tiles.path), device="cuda", variant="wide", params=["block=128", "threads=128"])
    assert str(refused.value) == ("tiles/wide cannot take block=128, rows=4, threads=128: a block's outputs are at "
                                  "most its threads (block * rows = 512 > threads)")
    with pytest.raises(UsageError, match=r"tiles/wide cannot take block=32, rows=3: .* \(block % rows = 2 != 0\)$"):
        render.sources(tiles, tiles.variants["wide"], {"block": 32, "rows": 3})  # eject, show: the same


@pytest.mark.parametrize("old, new, says", [
    ('rows = { default = 4,', 'threads = { default = 4,', "params.threads: the family's [params.threads] has that name"),
    ('"block * rows <= threads and', '"block / cols <= threads and', "names 'cols', which is not a parameter"),
    ('"block * rows <= threads and', '"__import__(1) and', "is not allowed"),
    ('"block * rows <= threads and', '"block ** 2 <= threads and', "is not allowed"),
    ('"block * rows <= threads and', '"block.real <= threads and', "is not allowed"),
    ('"block * rows <= threads and', '"block <= 1.5 and', "1.5 is not allowed"),
    ('"block * rows <= threads and', '"block <= and', "is not an expression"),
    ('"block * rows <= threads and', '"block > 64 and', "the defaults break one, block=64: a block's outputs"),
    ('why = "a block', 'wy = "a block', "unknown key 'wy'; did you mean 'why'?"),
])
def test_task_toml_mistakes_in_params_and_constraints_are_one_line(tiles, old, new, says):
    toml = tiles.path / "task.toml"
    assert toml.read_text().count(old) == 1, old
    toml.write_text(toml.read_text().replace(old, new))
    with pytest.raises(UsageError, match=re.escape(says)):
        registry.load_family(tiles.path)


@pytest.mark.parametrize("rule, params, holds", [
    ("a / b == 2", {"a": 7, "b": 3}, True),  # whole numbers, as C++ divides them
    ("a / b == -2", {"a": -7, "b": 3}, True),  # toward zero, not floor
    ("a // b == 2 and a % b == 1", {"a": 7, "b": 3}, True),
    ("1 <= a < b", {"a": 1, "b": 2}, True),
    ("1 <= a < b", {"a": 2, "b": 2}, False),
    ("not a == 1 or -a == -1", {"a": 1}, True),
    ("a / b >= 0", {"a": 1, "b": 0}, False),  # a division by zero breaks the rule, it does not crash kplay
])
def test_the_rule_language(rule, params, holds):
    assert constraints.parse({"rule": rule, "why": ""}, list(params)).holds(params) is holds


def table_rows(table) -> list[str]:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    console.print(table)
    return [line.strip() for line in console.export_text().splitlines() if line.strip().startswith("--param")]


def test_help_tables_list_each_variants_own_params_once_where_alike(tiles):
    rows = table_rows(report.sizes_table(tiles))
    assert [r.split()[1] for r in rows] == ["threads=", "block=", "rows=", "block="], rows
    assert "wide: outputs per block (32, 64, 128)" in rows[1] and "narrow: outputs per block (16, 32)" in rows[3]
    assert [r.split()[1] for r in table_rows(report.sizes_table(tiles, [tiles.variants["narrow"]]))] == ["threads=", "block="]
    tiles.path.joinpath("narrow.cu").write_text("constexpr int B = {{block}}, R = {{rows}}, T = {{threads}};\n")
    alike = tiles.path / "task.toml"  # narrow's block and rows made wide's: one row each, both named
    alike.write_text(alike.read_text().replace('block = { default = 32, choices = [16, 32], help = "outputs per block" }',
                                               'block = { default = 64, choices = [32, 64, 128], help = "outputs per block" }\n'
                                               'rows = { default = 4, choices = [2, 4, 8], help = "outputs per thread" }'))
    rows = table_rows(report.sizes_table(registry.load_family(tiles.path)))
    assert len(rows) == 3 and "wide, narrow: outputs per block" in rows[1], rows


def test_the_run_report_shows_each_variants_own_params():
    one = {"params": {"threads": 256}, "variants": [{"variant": "wide", "params": {"block": 64}}]}
    assert report._title({**one, "family": "tiles", "device": "cuda", "dtype": "float32", "sizes": {}, "seed": 0}
                         )[1].plain == "params: threads=256 · block=64"
    two = {"params": {}, "variants": [{"variant": "wide", "params": {"block": 64}}, {"variant": "plain", "params": {}}]}
    assert report._title({**two, "family": "tiles", "device": "cuda", "dtype": "float32", "sizes": {}, "seed": 0}
                         )[1].plain == "params: wide: block=64"


def test_eject_bakes_each_variants_own_values_in(tiles, tmp_path):
    from playground.workshop.scaffold import eject

    chosen = [tiles.variants["wide"], tiles.variants["narrow"]]
    eject(tiles, tmp_path / "out", chosen, tiles.parse_params(["block=32"], chosen))
    assert (tmp_path / "out" / "wide.cu").read_text() == "constexpr int B = 32, R = 4, T = 256;\n"
    assert (tmp_path / "out" / "narrow.cu").read_text() == "constexpr int B = 32, T = 256;\n"
    assert registry.load_family(tmp_path / "out").variants["wide"].params == {}  # the values are in the files now
