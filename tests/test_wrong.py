"""From the registry: every variant that can run here passes, and every known-wrong kernel fails as it says.

A family's known-wrong kernels are listed in tests/wrong/<family>/wrong.toml (a file replacing, or a patch
of, the source of its `variant`, default cpp); a family added later gets the first half by existing.
`slow = true` leaves one out of -m "not slow" (so do a crash, a build error and a run at 1e8), where another
known-wrong kernel fails the same part of the check.
"""

from pathlib import Path

import pytest

from conftest import WRONG, wrong_folder
from playground.family import registry
from playground.family.registry import tomllib

FAMILIES = registry.families()


def _runnable():
    for fam in FAMILIES.values():
        for v in fam.variants.values():
            marks = [pytest.mark.cuda] if v.device == "cuda" else []
            yield pytest.param(fam.name, v.name, "cuda" if v.device == "cuda" else "cpu", marks=marks, id=f"{fam.name}/{v.name}")


def _known_wrong(every_seed: bool = False):
    """The known-wrong kernels (every_seed: those run at seeds 0..9, the gamed ones)."""
    for fam in FAMILIES.values():
        manifest = WRONG / fam.name / "wrong.toml"
        for entry in tomllib.loads(manifest.read_text())["wrong"] if manifest.exists() else []:
            if entry.get("every_seed", False) != every_seed:
                continue
            marks = [pytest.mark.cuda] if entry.get("mode") in ("cuda", "sanitize") else []
            slow = entry.get("slow") or entry["exit"] != 1 or "1e8" in entry.get("args", []) or every_seed and \
                entry.get("name") != "knows_randn"  # -m "not slow": one gamed kernel at ten seeds
            marks += [pytest.mark.slow] if slow else []
            name = entry.get("name") or Path(entry["file"]).stem
            yield pytest.param(fam.name, entry, marks=marks, id=f"{fam.name}/{name}")


@pytest.mark.slow
@pytest.mark.parametrize("family, variant, device", list(_runnable()))
def test_every_variant_passes(kplay, family, variant, device):
    result = kplay("run", family, "--variant", variant, "--device", device, "--no-bench")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("family, entry", list(_known_wrong()))
def test_known_wrong_kernels_fail_as_they_say(kplay, tmp_path, family, entry):
    """mode run: here; cuda: on a GPU; sanitize: on a GPU, under compute-sanitizer's `tool`."""
    mode = entry.get("mode", "run")
    device = "cpu" if mode == "run" else "cuda"
    sanitized = ["--sanitize", entry["tool"]] if mode == "sanitize" else []
    result = kplay("run", wrong_folder(tmp_path / family, family, entry), "--device", device, "--no-bench", *sanitized,
                   *entry.get("args", []))
    assert result.exit_code == entry["exit"], result.output
    assert entry["says"] in " ".join(result.output.split()), result.output  # as one line: rich wraps at 80
    assert "Traceback" not in result.output


@pytest.mark.parametrize("family, entry", list(_known_wrong(every_seed=True)))
def test_gamed_kernels_fail_at_seeds_0_to_9(kplay, tmp_path, family, entry):
    """Kernels written to pass a check whose sizes, data and timed inputs they could predict: listed sizes, a
    cache keyed on samples of the input, data recognised as randn, an element in 1e5 dropped, a write undone.
    Each fails at each of the seeds 0..9, as it says (timed where the timing is what finds it)."""
    folder = wrong_folder(tmp_path / family, family, entry)
    device = "cuda" if entry.get("mode") == "cuda" else "cpu"
    for seed in range(10):
        result = kplay("run", folder, "--device", device, "--seed", seed, *entry.get("args", []),
                       *([] if entry.get("bench") else ["--no-bench"]))
        assert result.exit_code == entry["exit"], f"seed {seed}: {result.output}"
        assert entry["says"] in " ".join(result.output.split()), f"seed {seed}: {result.output}"


RESCALED = {"cpu": [("sum_skip_rescale_tenth.cpp", "cpp")],
            "cuda": [("fast_skip_rescale", "fast")]}


def _entry(family: str, name: str) -> dict:
    entries = tomllib.loads((WRONG / family / "wrong.toml").read_text())["wrong"]
    return next(e for e in entries if name in (e.get("name"), e.get("file")))


@pytest.mark.slow
@pytest.mark.parametrize("device, cases", [
    ("cpu", [(10**6, s) for s in range(10)] + [(10**7, 1)]),
    pytest.param("cuda", [(10**9, s) for s in range(5)], marks=pytest.mark.cuda)])
def test_skip_and_rescale_fails_at_every_seed(tmp_path, device, cases):
    """Certain, not likely: sum's probe spike is missed by at least 0.001 of its height (snippets/sum/spec.py)."""
    import playground

    for name, variant in RESCALED[device]:
        folder = wrong_folder(tmp_path / name, "sum", _entry("sum", name))
        passed = [(n, s) for n, s in cases
                  if playground.run(str(folder), sizes={"n": n}, device=device, variant=variant, seed=s, bench=False).ok]
        assert passed == [], f"{name} passed at (n, seed) {passed}"


CUDA_SUMS = [v.name for v in FAMILIES["sum"].variants.values() if v.device == "cuda"]


@pytest.mark.cuda
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("variant", CUDA_SUMS)
def test_every_correct_cuda_sum_is_clean_under_the_sanitizer(kplay, variant, tool):
    result = kplay("run", "sum", "--variant", variant, "--device", "cuda", "--sanitize", tool, "--n", "1e5")
    assert result.exit_code == 0, result.output
    assert f"{tool}: clean" in result.output
