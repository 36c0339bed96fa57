"""The check protocol: every case on poisoned memory, compared with the reference; a result, not a print.

A variant passes when, at each of the family's test sizes, three sizes drawn from the seed, the requested
size, its probe and the same memory reused, each on data drawn from the family's distributions
(family/data.py), its outputs match the float64 reference within the tolerance, in stream order, and the
inputs come back unchanged. Messages name the student's files, not the build cache's copies.
"""

from __future__ import annotations

import dataclasses

from ..core import events
from ..core.errors import KernelCrash, UsageError
from ..core.record import CHANGED, Check
from ..family import data
from ..family import spec as specs
from ..family.render import in_sources
from .guard import Guarded, can_guard

MAX_MISMATCHES = 5


class WrongOutput(Exception):
    """A spec hook's word that the kernel's output is malformed (a wrong count or shape of gradients, say):
    a failed check, named in the family's terms, not a crash."""


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


# ---- the protocol ---------------------------------------------------------------------------------------

def check_variant(spec, fam, req, ops, name: str, main, dtype, device,
                  on_event=events.ignore) -> tuple[Check, str, dict]:
    """Every case (_cases), on poisoned memory, in order, then the requested size in reused memory, then the
    spec's own verdicts (gradcheck): the merged Check, what the requested size printed, those verdicts."""
    checks, shown, main_label = [], "", case_label(fam, req.sizes, main_distribution(fam))
    math = fam.variants[name].math  # tf32: the tolerance of float32 inputs rounded to TF32
    alive = lambda: on_event(events.CALL)  # noqa: E731
    returned = lambda: on_event(events.RETURNED)  # noqa: E731
    expected = {}  # the requested size's reference, tolerance and copy, which its forms of the same shapes share
    try:
        for label, make, kind in _cases(spec, fam, req, main, dtype, device):
            guarded = kind != "form" and req.read_only and can_guard(device)  # a form keeps its layout
            on_event(events.CHECK, variant=name, case=label, read_only=guarded)
            with Guarded(make(), guarded) as zones:
                same = kind == "main" or kind == "form" and _shapes(zones.inputs) == _shapes(main)
                check, stdout = _one(spec, ops, name, zones.inputs, dtype, label, alive, expected if same else {},
                                     math, returned)
            checks.append(check.failing([f"{label}: {zones.overrun}"]) if zones.overrun else check)
            shown = stdout if label == main_label else shown  # what the requested size printed
        if "values" not in req.sizes:
            on_event(events.CHECK, variant=name, case=main_label + " reused")
            main_ok = all(c.ok for c in checks if c.cases == [main_label])  # fresh memory, this size
            reused = _reused(spec, ops, name, main, dtype, main_label, main_ok, alive, math, returned)
            checks += [reused] if reused else []
    except KernelCrash as e:
        raise KernelCrash(in_sources(str(e), fam, fam.variants[name])) from None
    alive()  # the spec's own verdicts (gradcheck) call the kernel too
    check, extra = merge(checks), spec.extra(ops, name, main)
    returned()
    failing = [f"{k}: FAIL" for k, val in extra.items() if val == "FAIL"]
    return (check.failing(failing) if failing else check), shown, extra


REUSED = ("the same memory with new values gave a wrong answer: a result kept from an earlier call "
          "(cached by its pointer, or by a sample of its values), or work still running on another stream?")


def _reused(spec, ops, variant, main, dtype, label, fresh_ok: bool, alive, math: str = "",
            returned=lambda: None) -> Check | None:
    """The requested size in memory the kernel has seen before, its floating-point values negated in place
    (the first and the last kept): a result cached by pointer, or by a hash of a few elements, is stale
    here and fails, with the likely causes first where the same size passed in fresh memory (`fresh_ok`).
    None where nothing can change (no float input) or the output is printed."""
    import torch

    inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in main)
    floats = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 2
              and x.is_contiguous()]
    if not floats or spec.from_stdout:
        return None
    case = label + " reused"
    alive()
    try:
        spec.call(ops, variant, *inputs)  # what a cache would keep
    except WrongOutput as e:
        return failed(first_line(e), "", case)
    except Exception as e:
        raise KernelCrash(f"{variant} raised at {case}: {first_line(e)}") from None
    returned()
    for x in floats:  # in place: the same pointer, the same first and last elements
        x.view(-1)[1:-1].neg_()
    check, _ = _one(spec, ops, variant, inputs, dtype, case, alive, math=math, returned=returned)
    if check.ok or not fresh_ok:
        return check
    return dataclasses.replace(check, mismatches=[f"{case}: {REUSED}", *check.mismatches])


def case_label(fam, sizes: dict, distribution: str | None = None) -> str:
    """'n=1025 uniform', 'batch=1 features=32 state=128': a case by its sizes and its data's distribution."""
    return " ".join([*(f"{k}={v}" for k, v in sizes.items() if k in fam.sizes), *([distribution] if distribution else [])])


def main_distribution(fam) -> str | None:
    """The requested size's data: the family's first distribution (None: as spec.py makes it)."""
    return fam.distributions[0] if fam.distributions else None


def _cases(spec, fam, req, main, dtype, device):
    """(label, inputs maker, kind): each test size ("test"): the family's, then three drawn from the seed
    (data.drawn_sizes), each with a distribution of the family's (all of them taken); the requested size
    (inputs `main`, "main") and each of the family's forms of it ("form": the same values); its probe
    ("probe"), on data of a non-zero mean where the family has one."""
    import torch

    values = "values" in req.sizes
    tests = [] if values else list(fam.test_sizes if req.test_sizes is None else req.test_sizes)
    if not values and req.test_sizes is None:
        own = {k: v for k, v in req.sizes.items() if k in fam.sizes}
        tests += data.drawn_sizes(own, fam.size_draw, req.seed, [{**own, **t} for t in tests])
    names = fam.distributions
    dists = data.assign(len(tests), names, req.seed) if names else [None] * len(tests)
    for test, dist in zip(tests, dists):
        sizes = {**req.sizes, **test}
        yield (case_label(fam, sizes, dist), lambda sizes=sizes, dist=dist: make_inputs(spec, sizes, dtype, device,
                                                                                        req.seed, dist), "test")
    main_label = case_label(fam, req.sizes, main_distribution(fam))
    yield main_label, lambda: main, "main"
    for form in () if values else fam.forms:  # the same values, laid out another way
        if form != "2-D" or _rows(main):  # made when its case runs: one form's copy in memory at a time
            yield f"{main_label} {form}", lambda form=form: _in_form(main, form), "form"
    if spec.probe and not values:  # the same size, changed where each element's position matters
        gen = torch.Generator().manual_seed(req.seed + 1)
        other = data.nonzero_mean(names)  # a skipped element costs its mean: zero-mean data hides it
        base = (lambda: make_inputs(spec, req.sizes, dtype, device, req.seed + 2, other)) if other else lambda: main
        label = case_label(fam, req.sizes, other or main_distribution(fam))
        yield label + " probed", lambda: spec.probe(base(), dtype, gen), "probe"


def _in_form(inputs, form: str):
    """The inputs with each tensor's values laid out another way (registry.FORMS): as a 2-D tensor (a 1-D one
    of n = k·m elements), as a view with stride 2, or one element past an aligned address. None where the
    form does not apply (a prime n has no 2-D shape)."""
    import torch

    def laid_out(x):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return x
        if form == "2-D":
            return None if _rows((x,)) is None else x.reshape(_rows((x,)), -1)
        if form == "strided":
            wide = torch.full((*x.shape[:-1], 2 * x.shape[-1]), float("nan") if x.is_floating_point() else -1,
                              dtype=x.dtype, device=x.device)
            wide[..., ::2] = x
            return wide[..., ::2]
        flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)  # misaligned: storage offset 1
        flat[1:] = x.flatten()
        return flat[1:].view(x.shape)

    out = tuple(laid_out(x) for x in inputs)
    return None if any(o is None for o in out) else out


def _shapes(inputs) -> list:
    return [tuple(x.shape) if hasattr(x, "shape") else x for x in inputs]


def _rows(inputs) -> int | None:
    """The rows a 2-D form of the first tensor input has (a 1-D one of n = rows·m elements), or None."""
    import torch

    x = next((x for x in inputs if isinstance(x, torch.Tensor) and x.dim()), None)
    return next((k for k in (4, 3, 2) if x is not None and x.dim() == 1 and x.numel() % k == 0 and x.numel() > k), None)


def make_inputs(spec, sizes, dtype, device, seed, distribution: str | None = None):
    """Seeded inputs, made on the CPU (the same numbers on every device), then moved; the data drawn from
    `distribution` (data.DISTRIBUTIONS) where one is named."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    try:
        made = spec.make_inputs(sizes, dtype, "cpu", gen)
        made = data.with_distribution(made, distribution, gen) if distribution else made
        return tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in made)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except (RuntimeError, MemoryError) as e:
        if isinstance(e, MemoryError) or "memory" in str(e).lower() or "alloc" in str(e).lower():
            shown = ", ".join(f"{k}={v:,}" for k, v in sizes.items() if isinstance(v, int))
            raise UsageError(f"not enough memory for the inputs at {shown}") from None
        raise


def _one(spec, ops, variant: str, inputs, dtype, case: str, alive=lambda: None, expected=None,
         math: str = "", returned=lambda: None) -> tuple[Check, str]:
    """Run the variant once on poisoned memory and compare; the input must come back unchanged. alive() is
    called just before the call and returned() once it has finished: --timeout bounds the call, not the
    reference, the tolerance or the copies around it. `expected` keeps the reference, the tolerance and the
    inputs' copy for the next case of the same values and shapes (the first computes them)."""
    import torch

    from ..core.capture import stdout_fd

    ref, (tol, source), before = _expect(spec, inputs, dtype, {} if expected is None else expected, math)
    if spec.output_like:
        _poison(spec.output_like(*inputs))
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    alive()
    try:
        with stdout_fd() as printed:
            made = spec.call(ops, variant, *inputs)
            # Each output is read in stream order on PyTorch's current stream, before any device-wide sync:
            # a kernel whose work is still running on another stream gives what the poisoned memory held.
            out = _read_in_stream_order(made) if cuda else made
            if cuda:
                torch.cuda.synchronize()  # an error in work that nothing read shows here; printf reaches stdout
    except WrongOutput as e:
        return failed(first_line(e), source, case), printed.text
    except Exception as e:
        raise KernelCrash(f"{variant} raised at {case}: {first_line(e)}") from None
    returned()
    if spec.from_stdout:
        try:
            out = spec.from_stdout(printed.text, *inputs)
        except AssertionError as e:
            return failed(str(e), source, case), printed.text
    elif wrong := _mistyped(made, ref, inputs, spec.outputs):
        return failed(wrong, source, case), printed.text
    result = compare(out, ref, tol, source, case, spec.outputs)
    if cuda and not result.ok and moved(out, made):
        result = dataclasses.replace(result, mismatches=[f"{case}: {LATE}", *result.mismatches])
    changed = [failed(f"input {k} {CHANGED} (it must not write its input)", source, case) for k in _changed(before, inputs)]
    return (changed[-1] if changed else result), printed.text


def _expect(spec, inputs, dtype, expected: dict, math: str = "") -> tuple:
    """The reference, the tolerance and a copy of the inputs, computed once into `expected` for the cases that
    share them."""
    import torch

    if not expected:
        expected.update(ref=spec.reference(*inputs), tol=specs.tolerance_for(spec, inputs, dtype, math),
                        before=[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    return expected["ref"], expected["tol"], expected["before"]


def _changed(before, inputs) -> list[int]:
    """The positions of the tensor inputs that differ from their copy (NaN where NaN was counts as unchanged)."""
    import torch

    return [k for k, (a, b) in enumerate(zip(before, inputs)) if isinstance(a, torch.Tensor)
            and not torch.equal(a, b) and not (a.isnan() & b.isnan() | (a == b)).all()]


def _mistyped(made, ref, inputs, names: tuple) -> str | None:
    """An output of another dtype or on another device than the input's: a float32 sum returned as float64
    passes the numbers and fails here. A reference that is not floating point (a count, an index) sets its
    output's dtype itself."""
    import torch

    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    if first is None:
        return None
    for k, (o, r) in enumerate(zip(as_tuple(made), as_tuple(ref))):
        name = names[k] if k < len(names) else f"out{k}" if len(as_tuple(ref)) > 1 else "out"
        want = first.dtype if r.is_floating_point() else r.dtype
        if isinstance(o, torch.Tensor) and (o.dtype != want or o.device != first.device):
            got, expected = f"{o.dtype} on {o.device}", f"{want} on {first.device}"
            return f"{name} is {got}, expected {expected} (the input's)"
    return None


LATE = ("the output changed after PyTorch's stream had finished: work still running on another stream "
        "(launch on PyTorch's current stream, or make it wait for yours)")


def moved(host, made) -> bool:
    """Whether an output read in stream order differs from the same output once the whole GPU has finished."""
    import torch

    for h, d in zip(as_tuple(host), as_tuple(made)):
        if isinstance(h, torch.Tensor) and isinstance(d, torch.Tensor):
            d = d.detach().cpu()
            if h.shape != d.shape:
                return True
            same = (h == d) | (h.isnan() & d.isnan()) if h.is_floating_point() else h == d
            if not bool(same.all()):
                return True
    return False


def _read_in_stream_order(out):
    """The outputs copied to pinned host memory on the current stream, which alone is then waited for (a
    copy to pageable memory may wait for more than that stream)."""
    import torch

    host = tuple(o.detach().to("cpu", non_blocking=True) if isinstance(o, torch.Tensor) else o for o in as_tuple(out))
    torch.cuda.current_stream().synchronize()
    return host if isinstance(out, (tuple, list)) else host[0]


def _poison(like):
    """Fill memory the allocator will hand out next with NaN (or -1), so unwritten outputs show."""
    import torch

    for t in like:
        junk = torch.empty_like(t)
        junk.fill_(float("nan") if t.is_floating_point() else -1)
        del junk


# A C++ check's message names the copy of the source in the build cache; these name the student's file.


def first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
