"""A laptop class: every family's CPU exercise started, failed, solved and ranked, with no GPU anywhere."""

import json
import shutil

import pytest

from conftest import ROOT


@pytest.mark.slow  # four starters and four solutions built, four checks: about 45 s
def test_a_laptop_class_starts_checks_and_ranks_every_family(kplay, tmp_path, monkeypatch):
    """No GPU: `kplay start NAME` takes each family's CPU exercise, whose solution passes (timed, but
    print_array), and a board of the records shows speedups."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    records = []
    for family, source in [("print_array", "print_array.cpp"), ("sum", "sum.cpp"), ("linear", "linear.cpp"),
                           ("lltm", "lltm.cpp")]:
        folder = tmp_path / family
        assert kplay("start", family, folder).exit_code == 0
        assert "TODO 1:" in (folder / source).read_text()  # the starter (test_exercise checks that one fails)
        shutil.copy(ROOT / "snippets" / family / source, folder / source)
        result = kplay("check", folder, "--json", "--name", f"ada-{family}")
        rec = json.loads(result.stdout)
        assert result.exit_code == 0 and rec["passed"] == rec["checked"], rec
        assert (rec["speedup"] is None) == (family == "print_array"), rec
        records.append(tmp_path / f"{family}.json")
        records[-1].write_text(result.stdout)
    board = kplay("board", *records, "--out", tmp_path)
    assert board.exit_code == 0, board.output
    assert "× torch.sum" in board.output.replace("×torch.sum", "× torch.sum") and "eager" in board.output, board.output
