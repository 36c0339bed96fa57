"""The README and the docs site: the site builds with no broken link, the README stays short, and no timing
figure is typed by hand without the results file it comes from.

The figures rule, on every line of README.md and docs/*.md outside fenced code blocks: a timing figure (a
number followed by µs, ns, ms, s, min, GB/s, TB/s, GFLOP/s, TFLOP/s, or × / x as a ratio, such as 1.17×; a
range such as 7–9 s counts both ends) may stand only on a line that cites a results file
(`benchmarks/results/NAME` on the line, or for a table row on the line just above the table); the file must
exist, and every such number, as written (commas dropped on both sides), must be in its text. A setting or
a limit that is not a measurement is written in words ("120 seconds", "four times"). Fenced code blocks
are examples of output, not claims.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"

NUMBER = r"\d[\d,]*(?:\.\d+)?"
UNIT = r"\s?(?:µs|us|ns|ms|s|min|GB/s|TB/s|GFLOP/s|TFLOP/s)(?![\w/])|[×x](?!\w)"  # a ratio: 1.17×, not 32 × 32
FIGURE = re.compile(rf"(?<![\w.,/^-])({NUMBER})(?:\s?[–-]\s?({NUMBER}))?(?:{UNIT})")
CITED = re.compile(r"benchmarks/results/([\w.+-]*\w)")
FORBIDDEN = re.compile(r"\bsessions?\b|\bissues?\s*#?\s*\d+|\bs\d{1,3}\b|\bturn\s+\d+|\bworklog of kplay\b",
                       re.IGNORECASE)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.lstrip()
        marker = re.match(r"(```+|~~~+)", stripped)
        if marker and (fence is None or stripped.startswith(fence)):
            fence = marker.group(1) if fence is None else None
            continue
        if fence is None:
            out.append((number, line))
    return out


def is_table(line: str) -> bool:
    return line.lstrip().startswith("|")


def figure_problems(path: Path) -> list[str]:
    problems, lines = [], prose_lines(path)
    texts: dict[str, str] = {}
    caption = ""
    for i, (number, line) in enumerate(lines):
        if is_table(line) and (i == 0 or not is_table(lines[i - 1][1])):  # a table starts: its caption line
            caption = next((text for _, text in reversed(lines[:i]) if text.strip()), "")
        cites = CITED.findall(line) + (CITED.findall(caption) if is_table(line) else [])
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}"
        for name in cites:
            if name not in texts:
                file = RESULTS / name
                if not file.is_file():
                    problems.append(f"{where}: cites benchmarks/results/{name}, which does not exist")
                    texts[name] = ""
                    continue
                texts[name] = file.read_text(errors="replace").replace(",", "") if file.suffix != ".png" else ""
        for m in FIGURE.finditer(line):
            if not cites:
                problems.append(f"{where}: {m.group(0)!r} cites no results file")
                continue
            for figure in filter(None, m.groups()):
                digits = re.escape(figure.replace(",", ""))
                if not any(re.search(rf"(?<![\d.]){digits}(?!\d)", texts[name]) for name in cites):
                    problems.append(f"{where}: {figure} (in {m.group(0)!r}) is not in {', '.join(cites)}")
    return problems


def test_the_docs_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install '.[dev]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_every_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if p.name not in nav]
    assert not missing, missing


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_the_readmes_links_exist():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"\w+://|mailto:|#", t)]
    missing = [t for t in local if t and not (ROOT / t).exists()]
    assert local and not missing, missing


def test_the_readme_keeps_the_two_set_up_commands():
    text = (ROOT / "README.md").read_text()
    assert "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/kplay run sum --n 1e7\n" in text
    assert '.venv/bin/pip install ".[dev]" && .venv/bin/python -m pytest -n 2 --dist loadfile\n' in text


def test_every_timing_figure_cites_a_results_file_that_holds_it():
    problems = [p for path in pages() for p in figure_problems(path)]
    assert not problems, "\n".join(problems)


def test_the_figure_rule_catches_what_it_should(tmp_path):
    name = "2026-12-04-7ec4fe1-cpu-setup.md"
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "fast: 1.17× torch.sum",  # no citation
        f"fast: 99.5 µs (`benchmarks/results/{name}`)",  # a number its file does not hold
        "see `benchmarks/results/2099-01-01-0000000-cpu-none.md`",  # no such file
        "```", "cpp  1.91 ms  1.00×", "```",  # a fenced example: allowed
        "a setting: 120 seconds, 32 × 32 tiles, 8x8, 1e3..1e9:x2",  # not figures
    ]))
    problems = figure_problems(page)
    assert len(problems) == 3, problems
    assert "cites no results file" in problems[0] and "99.5" in problems[1] and "does not exist" in problems[2]


def test_every_benchmark_script_is_listed_with_its_command():
    listed = (DOCS / "benchmarks.md").read_text()
    scripts = [p for p in [*(ROOT / "benchmarks").glob("*"), *(ROOT / "benchmarks" / "probes").glob("*")]
               if p.suffix in (".py", ".sh") and p.name != "common.py"]
    missing = [str(p.relative_to(ROOT)) for p in scripts if str(p.relative_to(ROOT)) not in listed]
    assert not missing, missing


def test_no_word_of_how_the_project_was_made():
    """No "session 7", "issue 41", "s18" in the prose (fenced blocks are left out: real output may hold
    `add.s64`), nor an issue or session number in the sources, tests and benchmark scripts."""
    found = [f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}" for path in pages()
             for n, line in prose_lines(path) for m in FORBIDDEN.finditer(line)]
    numbered = re.compile(r"\b(?:issue|session)\s*#?\s*\d+", re.IGNORECASE)
    sources = [p for folder in ("playground", "snippets", "tests", "benchmarks", "examples")
               for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".toml", ".cu", ".cpp", ".h",
                                                                           ".cuh", ".sh", ".md", ".ipynb")
               and "results" not in p.parts and p.name != "test_docs.py"]
    found += [f"{p.relative_to(ROOT)}:{n}: {m.group(0)!r}" for p in sources
              for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) for m in numbered.finditer(line)]
    assert not found, "\n".join(found)


def test_the_results_page_is_up_to_date():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import results_page
    finally:
        sys.path.pop(0)
    assert (DOCS / "results.md").read_text() == results_page.page(), \
        "docs/results.md is out of date: run python benchmarks/results_page.py"
    listed = set(CITED.findall((DOCS / "results.md").read_text()))
    assert listed == {p.name for p in RESULTS.iterdir() if p.is_file() and not p.name.startswith(".")}
