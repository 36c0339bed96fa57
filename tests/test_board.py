"""kplay board: check records ranked per exercise, failures by kind, board.csv, board.html in a real browser."""

import csv
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from playground.workshop import board

ENV = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def invoke(*args):
    from cli import app

    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def record(student, passed=10, checked=10, failures=None, speedup=None, family="sum", variant="shuffle",
           baseline="torch.sum", exit_code=None):
    """A check record as `kplay check --json` writes it (without the run, which the board does not read)."""
    done = checked > 0 and passed == checked
    return {"student": student, "family": family, "variant": variant, "passed": passed, "checked": checked,
            "failures": failures or {}, "speedup": speedup, "baseline": baseline if speedup else None,
            "exit_code": (0 if done else 1) if exit_code is None else exit_code, "run": {}}


def files(folder: Path, *records) -> list[Path]:
    folder.mkdir(exist_ok=True)
    out = []
    for r in records:
        out.append(folder / f"{r['student'] or 'nameless'}.json")
        out[-1].write_text(json.dumps(r, indent=2))
    return out


def csv_of(folder: Path) -> list[dict]:
    with (folder / "board.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# ---- real check records: print_array/cpp's starter fails, its solution passes, a typo does not build -----

@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Three real `kplay check --json` files, as three students would hand them in."""
    root = tmp_path_factory.mktemp("class")
    assert invoke("eject", "print_array", root / "solution", "--variant", "cpp", "--solution").exit_code == 0
    solution = (root / "solution" / "print_array.cpp").read_text()
    out = []
    for name, source in (("ada", None), ("bob", solution), ("cy", "this is not C++;\n")):
        assert invoke("start", "print_array/cpp", root / name).exit_code == 0
        if source:
            (root / name / "print_array.cpp").write_text(source)
        result = invoke("check", root / name, "--device", "cpu", "--json", "--name", name, "--seed", "0")
        (root / f"{name}.json").write_text(result.stdout)
        out.append(root / f"{name}.json")
    return out


def test_real_check_records_are_ranked_with_their_failures_by_kind(checked, tmp_path):
    result = invoke("board", *checked, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "print_array/cpp · 3 students · 1 passed every case"
    rows = [line.split() for line in lines if line[:1].isdigit()]
    assert [r[:2] for r in rows] == [["1", "bob"], ["2", "ada"], ["2", "cy"]]  # ada and cy: 0 passed, tied
    assert "36/36" in rows[0] and rows[1][-4:] == ["0/36", "36", "wrong", "value"]  # four dtypes, 6 + 3 drawn cases each
    assert rows[2][-3:] == ["0/1", "build", "error"]
    assert f"wrote {tmp_path / 'board.csv'}" in lines and f"wrote {tmp_path / 'board.html'}" in lines
    table = csv_of(tmp_path)
    assert [(r["rank"], r["student"], r["passed"], r["checked"], r["exit_code"]) for r in table] == [
        ("1", "bob", "36", "36", "0"), ("2", "ada", "0", "36", "1"), ("2", "cy", "0", "1", "3")]
    assert [(r["wrong value"], r["build"]) for r in table] == [("0", "0"), ("36", "0"), ("0", "1")]
    assert all(r["exercise"] == "print_array/cpp" and r["speedup"] == "" for r in table)


# ---- ranking, grouping, names ------------------------------------------------------------------------------

def test_ranked_by_cases_passed_then_speedup_and_ties_share_a_rank(tmp_path):
    paths = files(tmp_path / "in", record("slow", speedup=0.8), record("fast", speedup=2.5),
                  record("half", passed=5, failures={"wrong value": 4, "stale result": 1}),
                  record("most", passed=9, failures={"wrong value": 1}), record("none", passed=0, failures={"other": 10}),
                  record("alsofast", speedup=2.5), record("broken", passed=0, checked=0, failures={"build": 1}))
    groups = board.rank(board.load([str(p) for p in paths])[0])
    assert [(k, e.student) for k, e in groups[0].rows] == [
        (1, "alsofast"), (1, "fast"), (3, "slow"), (4, "most"), (5, "half"), (6, "broken"), (6, "none")]
    result = invoke("board", *paths, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "half " in result.stdout and "4 wrong value, 1 stale result" in result.stdout
    assert "2.50×" in result.stdout and "×torch.sum" in result.stdout
    table = csv_of(tmp_path)
    assert [r["student"] for r in table] == ["alsofast", "fast", "slow", "most", "half", "broken", "none"]
    half = table[4]
    assert (half["wrong value"], half["stale result"], half["build"], half["speedup"]) == ("4", "1", "0", "")
    assert table[0]["speedup"] == "2.5" and table[0]["baseline"] == "torch.sum"
    assert list(table[0])[:8] == board.CSV_HEAD and list(table[0])[-1] == "file"


def test_speedups_the_same_within_their_noise_share_a_rank(tmp_path):
    """The board's ties follow kplay run's 'same' (record.same): 1.10x ±5% and 1.08x ±5% are one rank."""
    noisy = lambda name, speedup, noise: {**record(name, speedup=speedup), "speedup_noise": noise}
    paths = files(tmp_path / "in", noisy("ada", 1.10, 0.05), noisy("bob", 1.08, 0.05), noisy("cy", 1.08, 0.001),
                  noisy("dee", 0.90, 0.001))
    groups = board.rank(board.load([str(p) for p in paths])[0])
    assert [(k, e.student) for k, e in groups[0].rows] == [(1, "ada"), (1, "bob"), (1, "cy"), (4, "dee")]


def test_several_exercises_are_grouped_each_ranked_on_its_own(tmp_path):
    paths = files(tmp_path / "in", record("ada", speedup=1.2), record("bob", family="linear", variant="cuda-tiled",
                                                                        passed=3, checked=8, failures={"wrong value": 5}),
                  record("cy", family="linear", variant="cuda-tiled", passed=8, checked=8, speedup=0.9, baseline="torch.nn.functional.linear"))
    result = invoke("board", *paths, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    titles = [line for line in result.stdout.splitlines() if " · " in line]
    assert titles == ["linear/cuda-tiled · 2 students · 1 passed every case", "sum/shuffle · 1 student · 1 passed every case"]
    assert [(r["exercise"], r["rank"], r["student"]) for r in csv_of(tmp_path)] == [
        ("linear/cuda-tiled", "1", "cy"), ("linear/cuda-tiled", "2", "bob"), ("sum/shuffle", "1", "ada")]


def test_the_student_is_the_records_name_else_the_files_stem(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "dee.json").write_text(json.dumps(record("")))
    (tmp_path / "in" / "x.json").write_text(json.dumps(record("eve")))
    (tmp_path / "in" / "ps.json").write_text(json.dumps(record("[/b]fay")), encoding="utf-16")  # PowerShell's >
    (tmp_path / "in" / "gus.json").write_text(json.dumps(record("<i>gus</i>")))
    result = invoke("board", *sorted((tmp_path / "in").iterdir()), "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert sorted(r["student"] for r in csv_of(tmp_path)) == ["<i>gus</i>", "[/b]fay", "dee", "eve"]
    assert "[/b]fay" in result.stdout  # a name is shown as it is, never read as rich markup
    page = (tmp_path / "board.html").read_text()
    assert "&lt;i&gt;gus&lt;/i&gt;" in page and "<i>" not in page


# ---- bad input: one line, exit 2, nothing written ---------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("ninja: build stopped\n", "not JSON (Expecting value at line 1); expected the output of kplay check --json"),
    ("[1, 2]", "not a kplay check --json record (a JSON list, not an object)"),
    ('{"family": "sum", "variant": "cpp", "ok": true}', "not a kplay check --json record (no passed, checked, failures, exit_code)"),
    (json.dumps({**record("x"), "passed": "ten"}), "not a kplay check --json record (passed of the wrong type)"),
    (json.dumps({**record("x"), "failures": {"wrong value": "6"}}), "not a kplay check --json record (failures of the wrong type)"),
    (json.dumps({**record("x"), "speedup": -1}), "not a kplay check --json record (speedup of the wrong type)"),
    (json.dumps({**record("x"), "passed": -5, "checked": 3}), "not a kplay check --json record (passed of the wrong type)"),
    (json.dumps({**record("x"), "passed": 4, "checked": 3}), "not a kplay check --json record (passed of the wrong type)"),
])
def test_a_file_that_is_not_a_check_record_is_skipped_with_one_warning(tmp_path, text, message):
    """One student's broken file never refuses the class; a board of nothing but such files is an error."""
    good, bad = files(tmp_path, record("ada"))[0], tmp_path / "bob.json"
    bad.write_text(text)
    result = invoke("board", good, bad, "--out", tmp_path / "out")
    assert result.exit_code == 0 and [r["student"] for r in csv_of(tmp_path / "out")] == ["ada"], result.output
    assert result.stderr.splitlines() == [f"warning: skipped {bad}: {message}"], result.stderr
    alone = invoke("board", bad, "--out", tmp_path / "alone")
    assert alone.exit_code == 2 and alone.stderr.splitlines() == [
        f"error: no check record among the 1 file: {bad}: {message}"], alone.stderr
    assert not (tmp_path / "alone").exists()


def test_an_empty_file_is_skipped_and_a_could_not_run_record_is_ranked_last(kplay, tmp_path, monkeypatch):
    """`check --json` writes one record also when nothing could run (a CUDA exercise without a GPU), with the
    one line on stderr and exit 2; the board shows why."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    folder = tmp_path / "dee"
    assert kplay("eject", "sum", folder, "--variant", "shuffle", "--starter").exit_code == 0
    with open(folder / "task.toml", "a") as f:  # what kplay start adds, without its nvcc build
        f.write('\n[exercise]\nfamily = "sum"\nvariant = "shuffle"\nstudent = "dee"\nid = "abc123"\nhints = []\n')
    result = kplay("check", folder, "--json")
    assert result.exit_code == 2 and "has only cuda variants" in result.stderr, result.output
    rec = json.loads(result.stdout)
    assert (rec["student"], rec["family"], rec["variant"], rec["exit_code"]) == ("dee", "sum", "shuffle", 2)
    (tmp_path / "dee.json").write_text(result.stdout)
    (tmp_path / "cy.json").write_text("")
    good = files(tmp_path / "in", record("ada"))[0]
    shown = invoke("board", good, tmp_path / "dee.json", tmp_path / "cy.json", "--out", tmp_path / "out")
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.splitlines() == [f"warning: skipped {tmp_path / 'cy.json'}: empty (a check that printed nothing)"]
    rows = [line for line in shown.stdout.splitlines() if line[:1].isdigit()]
    assert rows[0].split()[1] == "ada" and "dee" in rows[1] and "could not run: sum in" in rows[1], rows
    assert "could not run: sum in" in (tmp_path / "out" / "board.html").read_text()


@pytest.mark.parametrize("args, message", [
    ((), "kplay board needs RESULTS files: each the output of kplay check --json"),
    (("{tmp}/nobody.json",), "{tmp}/nobody.json: no such file"),
    (("{tmp}/*.json",), "{tmp}/*.json: no such file (a pattern that matched no files)"),
    (("{tmp}",), "{tmp} is a folder: give the files in it, e.g. {tmp}/*.json"),
])
def test_no_files_or_a_missing_one_is_one_line_exit_2(tmp_path, args, message):
    result = invoke("board", *[a.format(tmp=tmp_path) for a in args], "--out", tmp_path / "out")
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"error: {message.format(tmp=tmp_path)}"], result.output


def test_a_student_twice_on_one_exercise_keeps_the_newer_record(tmp_path):
    one, two = tmp_path / "ada.json", tmp_path / "ada-again.json"
    two.write_text(json.dumps(record("ada", passed=3)))
    one.write_text(json.dumps(record("ada")))
    os.utime(two, (1e9, 1e9))  # ada-again.json is the older
    result = invoke("board", one, two, "--out", tmp_path)
    assert result.exit_code == 0 and [r["passed"] for r in csv_of(tmp_path)] == ["10"], result.output
    assert result.stderr.splitlines() == [
        f"warning: {two} and {one} are both ada on sum/shuffle: kept {one}, the newer"], result.stderr


def test_the_same_file_twice_counts_once_and_a_formula_name_is_quoted_in_the_csv(tmp_path, monkeypatch):
    (ada,) = files(tmp_path / "in", record("=HYPERLINK(\"x\")"))
    monkeypatch.chdir(tmp_path / "in")
    result = invoke("board", ada, ada, ada.name, "--out", tmp_path)  # `*.json ada.json` names it twice
    assert result.exit_code == 0, result.output
    assert [r["student"] for r in csv_of(tmp_path)] == ["'=HYPERLINK(\"x\")"]  # text, not a formula


def test_a_board_file_kplay_did_not_write_is_never_overwritten(tmp_path):
    paths = files(tmp_path / "in", record("ada"))
    out = tmp_path / "out"
    assert invoke("board", *paths, "--out", out).exit_code == 0
    first = (out / "board.html").read_text()
    again = invoke("board", *paths, "--out", out)  # kplay's own files: rewritten
    assert again.exit_code == 0 and (out / "board.html").read_text().startswith(first[:200])
    for name in ("board.csv", "board.html"):
        mine = tmp_path / name.replace(".", "-")
        mine.mkdir()
        (mine / name).write_text("my grades, by hand\n")
        result = invoke("board", *paths, "--out", mine)
        assert result.exit_code == 2 and result.stdout == "" and result.stderr.splitlines() == [
            f"error: {mine / name} exists and is not a board kplay wrote: move it, or choose another --out"]
        assert (mine / name).read_text() == "my grades, by hand\n" and len(list(mine.iterdir())) == 1


def test_an_out_that_is_a_file_is_one_line_before_the_table(tmp_path):
    (tmp_path / "file").write_text("")
    paths = files(tmp_path / "in", record("ada"))
    for out, message in ((tmp_path / "file", "it is not a folder"), (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is not a folder")):
        result = invoke("board", *paths, "--out", out)
        assert result.exit_code == 2 and result.stdout == "", result.output  # refused before the table
        assert result.stderr.splitlines() == [f"error: --out {out}: {message}"]


# ---- board.html in a real headless Chromium ---------------------------------------------------------------

CLASS = [record("ada", speedup=1.07), record("bob", speedup=0.85), record("grace", speedup=2.31),
         record("heidi", passed=9, failures={"stale result": 1}), record("erin", passed=4, failures={"wrong value": 6}),
         record("frank", passed=0, checked=0, failures={"build": 1}),
         record("a-student-with-a-very-long-login-name-that-goes-on-and-on-without-a-space", speedup=1.5),
         record("ivan", family="print_array", variant="cpp", passed=3, checked=3),
         record("judy", family="print_array", variant="cpp", passed=1, checked=3, failures={"other": 2})]
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--window-size=1280,900"]


def chromium(tmp_path, monkeypatch):
    """Debian's chromium driven by its chromedriver; a skip where either, or selenium, is not installed."""
    missing = pytest.fail if os.environ.get("KPLAY_NEED_BROWSER") == "1" else pytest.skip  # .ci/run sets it
    try:
        from selenium import webdriver
    except ImportError:
        missing("needs selenium (pip install -e '.[dev]')")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        missing("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager never goes looking for a driver on the network
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    browser.set_window_size(1280, 900)
    return browser


def test_the_page_renders_every_student_and_its_chart_within_1280_px(tmp_path, monkeypatch):
    assert invoke("board", *files(tmp_path / "in", *CLASS), "--out", tmp_path).exit_code == 0
    page = (tmp_path / "board.html").read_text()
    assert "http" not in page and "<script" not in page and "<link" not in page  # nothing to fetch
    browser = chromium(tmp_path, monkeypatch)
    try:
        started = time.monotonic()
        browser.get((tmp_path / "board.html").as_uri())
        rows = browser.find_elements("css selector", "tbody tr")
        assert len(rows) == len(CLASS) and rows[0].text.split()[:2] == ["1", "ivan"]
        bars = browser.find_elements("css selector", "svg rect.bar")
        assert len(bars) == 4 + 2  # sum/shuffle: the 4 timed; print_array/cpp: both passed cases
        boxes = [browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height]", b)
                 for b in bars]
        assert all(w > 0 and h > 0 for w, h in boxes), boxes
        inner, scroll, right = browser.execute_script(
            "return [window.innerWidth, document.documentElement.scrollWidth, Math.max(...Array.from("
            "document.querySelectorAll('*'), e => e.getBoundingClientRect().right))]")
        assert inner == 1280 and scroll <= 1280 and right <= 1280, (inner, scroll, right)
        _screenshot(browser, tmp_path)
        print(f"page loaded and checked in {time.monotonic() - started:.2f} s")
    finally:
        browser.quit()


def _screenshot(browser, tmp_path: Path) -> None:
    """The whole page, for a person to look at; KPLAY_SCREENSHOTS=1 keeps it in benchmarks/results."""
    height, chrome = browser.execute_script(
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]")
    browser.set_window_size(1280, height + chrome)
    shot = tmp_path / "board.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("KPLAY_SCREENSHOTS") == "1":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import common

        shutil.copy(shot, ROOT / "benchmarks" / "results" / common.results_name("board-screenshot.png", "cpu"))


def test_a_case_is_counted_by_its_diagnosis():
    from playground.run import check
    from playground.workshop.exercise import kind

    assert kind("n=9 reused", f"n=9 reused: {check.REUSED}") == "stale result"
    assert kind("n=9 reused", "n=9 reused: out[]: got 1, expected 2") == "wrong value"  # wrong everywhere: no cache
    assert kind("n=9", f"n=9: {check.LATE}") == "wrong value"
