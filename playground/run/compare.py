"""Two runs of the same kernel, before and after an edit: faster, slower or the same, per contender."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from ..core.errors import UsageError
from ..core.record import Stats, same


def verdict(before: dict, after: dict) -> str:
    """'same' within the noise (record.same); otherwise 'faster' or 'slower' (after against before)."""
    old, new = Stats.from_dict(before), Stats.from_dict(after)
    if same(old, new):
        return "same"
    return "faster" if new.median_s < old.median_s else "slower"


def load(path: Path, req=None) -> dict:
    """A `kplay run --json` record, checked enough that a wrong file is one line, not a traceback; with the
    request, a record of another family or other sizes is refused (its times would not compare)."""
    try:
        record = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--against {path}: {e.strerror.lower() if e.strerror else e}") from None
    except ValueError:
        raise UsageError(f"--against {path}: not JSON (write it with kplay run ... --json > {shlex.quote(str(path))})") from None
    if not _is_run(record):
        raise UsageError(f"--against {path}: not a kplay run record (write it with kplay run ... --json)")
    theirs = {"family": record["family"], "sizes": record.get("sizes")}
    for key, ours in (("family", req and req.family), ("sizes", req and req.sizes)):
        if req is not None and theirs[key] != ours:
            raise UsageError(f"--against {path}: a run of {_shown(theirs[key])}, this one is of {_shown(ours)}")
    return record


def _is_run(record) -> bool:
    """A run's record with its variants' timings (or none), as --json writes it."""
    timed = lambda t: t is None or isinstance(t, dict) and all(k in t for k in ("median_s", "q1_s", "q3_s"))  # noqa: E731
    return (isinstance(record, dict) and "family" in record and isinstance(record.get("variants"), list)
            and all(isinstance(v, dict) and "variant" in v and timed(v.get("time")) for v in record["variants"]))


def of_dtype(before: dict | None, after: dict) -> dict | None:
    """The run in `before` (its record, or one of its other_runs: --variant all over several dtypes) in the
    dtype of `after`, else None."""
    runs = [before, *before.get("other_runs", [])] if isinstance(before, dict) else []
    return next((r for r in runs if _is_run(r) and r.get("dtype") == after.get("dtype")), None)


def matched(before: dict | None, after: dict, first: bool = True) -> dict | None:
    """What `after` compares with: `before`'s run in its dtype; for the first run, else `before` itself."""
    return of_dtype(before, after) or (before if first else None)


def with_against(before: dict | None, result: dict, first: bool = True) -> dict:
    """`result`, and each of its other_runs, with an 'against': the comparison with `before`'s run (matched)."""
    for r, top in [(result, first), *((r, False) for r in result.get("other_runs", []))]:
        if (theirs := matched(before, r, top)) and "variants" in r:
            r["against"] = record(theirs, r)
    return result


def rows(before: dict, after: dict) -> list[tuple[str, dict, dict, str]]:
    """(name, before's time, after's time, verdict) for every contender timed in both runs."""
    def timed(r: dict) -> dict:
        found = {v["variant"]: v["time"] for v in r["variants"]}
        return found | {name: b["time"] for name, b in r.get("baselines", {}).items()}

    old, new = timed(before), timed(after)
    return [(name, old[name], t, verdict(old[name], t)) for name, t in new.items() if t and old.get(name)]


def _shown(value) -> str:
    """Sizes as kplay writes them: n=10,000 (a --values list as it is)."""
    if not isinstance(value, dict):
        return str(value)
    return " ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in value.items())


def differences(before: dict, after: dict) -> list[str]:
    """What makes the two runs not like for like (another device or dtype: the family and sizes are refused)."""
    keys = ("family", "device", "dtype", "sizes")
    return [f"{k}: {_shown(before.get(k))} before, {_shown(after.get(k))} now" for k in keys
            if before.get(k) != after.get(k)]


def record(before: dict, after: dict) -> dict:
    """The comparison in a --json record: each contender's medians and verdict, and what differs in the runs."""
    return {"contenders": [{"name": name, "before_s": old["median_s"], "after_s": new["median_s"], "verdict": word}
                           for name, old, new, word in rows(before, after)],
            "differences": differences(before, after)}
