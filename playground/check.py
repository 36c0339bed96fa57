"""Compare a kernel's outputs with the reference: a result, not a print."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_MISMATCHES = 5


@dataclass(frozen=True)
class Check:
    ok: bool
    max_abs_err: float
    tolerance: float
    tolerance_source: str
    mismatches: list[str] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)  # the sizes checked, e.g. "n=1"
    failed: dict = field(default_factory=dict)  # each failing case's first message: mismatches stop at 5, cases do not


def as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare(out, ref, tol, source: str, case: str = "", names: tuple = ()) -> Check:
    """Every output against its reference; NaN, a wrong shape or an error over tol fails."""
    import torch

    outs, refs = as_tuple(out), as_tuple(ref)
    tols = as_tuple(tol) if isinstance(tol, (tuple, list)) else (tol,) * len(refs)
    where = f"{case}: " if case else ""
    if len(outs) != len(refs):
        return Check(False, float("inf"), max(tols), source, [f"{where}{len(outs)} outputs, expected {len(refs)}"], [case])
    worst, bad = 0.0, []
    for k, (o, r, t) in enumerate(zip(outs, refs, tols)):
        name = names[k] if k < len(names) else f"out{k}" if len(refs) > 1 else "out"
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(r.shape):
            got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
            bad.append(f"{where}{name} has shape {got}, expected {tuple(r.shape)}")
            worst = float("inf")
            continue
        o64, r64 = o.detach().cpu().double(), r.detach().cpu().double()
        err = (o64 - r64).abs()
        if not o.is_floating_point() and not r.is_floating_point():  # above 2^53 doubles round: compare exactly
            err[(o.detach().cpu().long() != r.detach().cpu().long()) & (err == 0)] = 1.0
        err[o64.isnan() != r64.isnan()] = float("inf")  # NaN where the reference has none: unwritten or wrong
        err[o64.isnan() & r64.isnan()] = 0.0
        if err.numel():
            worst = max(worst, err.max().item())
        for flat in (err > t).flatten().nonzero().flatten()[:max(0, MAX_MISMATCHES - len(bad))].tolist():
            idx = list(torch.unravel_index(torch.tensor(flat), o.shape)) if o.dim() else []
            at = "[" + ", ".join(str(int(i)) for i in idx) + "]"
            bad.append(f"{where}{name}{at}: got {o64.flatten()[flat].item():.9g}, expected {r64.flatten()[flat].item():.9g}")
    return Check(not bad, worst, max(tols), source, bad[:MAX_MISMATCHES], [case])


def failed(reason: str, source: str = "", case: str = "") -> Check:
    where = f"{case}: " if case else ""
    return Check(False, float("inf"), 0.0, source, [where + reason], [case])


def merge(checks: list[Check]) -> Check:
    """One verdict over several sizes; the error shown is the main (last) case's, or the first failing case's."""
    shown = next((c for c in checks if not c.ok), checks[-1])
    return Check(
        ok=all(c.ok for c in checks),
        max_abs_err=shown.max_abs_err,
        tolerance=shown.tolerance,
        tolerance_source=shown.tolerance_source,
        mismatches=_first_of_each(checks),
        cases=[case for c in checks for case in c.cases],
        failed={c.cases[0]: c.mismatches[0] for c in checks if not c.ok and c.cases and c.mismatches},
    )


def _first_of_each(checks: list[Check]) -> list[str]:
    """At most MAX_MISMATCHES lines, in order: the first of each failing case (its diagnosis, where it has
    one), then the cases' further lines while there is room."""
    lines = [(i, j, m) for i, c in enumerate(checks) for j, m in enumerate(c.mismatches)]
    firsts = [line for line in lines if line[1] == 0][:MAX_MISMATCHES]
    rest = [line for line in lines if line[1] > 0][:MAX_MISMATCHES - len(firsts)]
    return [m for _, _, m in sorted(firsts + rest)]
