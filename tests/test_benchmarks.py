"""The benchmarks' shared helpers: commands timed in turns with fresh folders, and the verdict from two timings."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import common  # noqa: E402
from playground.timing import Stats  # noqa: E402

# Appends its name and the folder $COLD names (and whether that folder already existed) to a log, then
# prints a number, as a build script prints its own seconds.
SCRIPT = ("import os, sys; d = os.environ['COLD']; seen = os.path.exists(d); os.makedirs(d, exist_ok=True); "
          "open(sys.argv[1], 'a').write(f'{sys.argv[2]} {d} {seen}\\n'); print('took', sys.argv[3])")


def test_median_of_takes_turns_with_a_fresh_folder_per_run(tmp_path):
    log = tmp_path / "log"
    cmds = {name: [sys.executable, "-c", SCRIPT, str(log), name, secs] for name, secs in (("a", "1.5"), ("b", "2"))}
    runs = common.median_of(3, cmds, fresh=("COLD",))
    lines = [ln.split() for ln in log.read_text().splitlines()]
    assert [ln[0] for ln in lines] == ["a", "b"] * 3  # rounds, not one command three times over
    assert len({ln[1] for ln in lines}) == 6 and {ln[2] for ln in lines} == {"False"}  # a new, empty folder each run
    assert not any(Path(ln[1]).exists() for ln in lines)  # and removed afterwards
    assert runs["a"].printed == (1.5, 1.5, 1.5) and runs["b"].inner == 2.0
    assert len(runs["a"].walls) == 3 and 0 < runs["a"].wall < 30


def test_a_failing_command_ends_the_benchmark_with_its_error():
    with pytest.raises(SystemExit) as e:
        common.wall([sys.executable, "-c", "import sys; sys.exit('no compiler here')"])
    assert "failed (exit 1)" in str(e.value) and "no compiler here" in str(e.value)


def stats(q1, median, q3):
    return Stats(median_s=median, q1_s=q1, q3_s=q3, samples=30, method="perf_counter")


@pytest.mark.parametrize("mine, theirs, expected", [
    (stats(1.0, 1.1, 1.2), stats(1.3, 1.4, 1.5), "FASTER"),
    (stats(1.3, 1.4, 1.5), stats(1.0, 1.1, 1.2), "SLOWER"),
    (stats(1.0, 1.2, 1.35), stats(1.3, 1.4, 1.5), "TIE"),  # the ranges overlap: a tie, even 15% apart
    (stats(1.0, 1.5, 2.0), stats(1.4, 1.45, 1.5), "TIE"),
])
def test_verdict_is_a_tie_where_the_interquartile_ranges_overlap(mine, theirs, expected):
    assert common.verdict(mine, theirs) == expected
