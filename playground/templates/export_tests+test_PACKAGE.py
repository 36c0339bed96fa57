"""The exported kernel against its reference, on seeded inputs (the same check kplay runs)."""

import torch

from @PACKAGE@ import ops
from @PACKAGE@ import spec


def test_matches_reference(capfd):
    device = "@DEVICE@"
    if device == "cuda" and not torch.cuda.is_available():
        import pytest

        pytest.skip("needs a GPU")
    dtype = getattr(torch, "@DTYPE@")
    sizes = @SIZES@  # the family's sizes with its last awkward test size
    inputs = tuple(x.to(device) for x in spec.make_inputs(sizes, dtype, "cpu", torch.Generator().manual_seed(0)))
    out = spec.call(ops, "@VARIANT@", *inputs)
    if hasattr(spec, "from_stdout"):
        out = spec.from_stdout(capfd.readouterr().out, *inputs)
    tol, _ = spec.tolerance(*inputs, dtype)
    outs, refs = (out, spec.reference(*inputs))
    outs, refs = (outs, refs) if isinstance(refs, tuple) else ((outs,), (refs,))
    tols = tol if isinstance(tol, (tuple, list)) else [tol] * len(refs)
    for o, r, t in zip(outs, refs, tols):
        assert (o.double().cpu() - r.double().cpu()).abs().max().item() <= t
