"""kplay's engine: find a kernel family, build it, check it against PyTorch, time it.

    import playground
    result = playground.run("sum", sizes={"n": 10_000_000}, device="cpu")
    ops = playground.load("sum")            # torch.ops namespace of the compiled snippet
    ops.sum(torch.randn(1000))
"""

from .core.errors import BuildError, KernelCrash, KplayError, UsageError
from .family.registry import families, find
from .family.request import Request, make
from .core.record import RunResult
from .run.runner import run


def load(name: str, variant: str | None = None, device: str = "cpu", params: dict | None = None,
         paths: list[str] | None = None):
    """Build (or reuse) one variant and return its ops, ready to call on tensors."""
    from .compiler.build import build

    req = make(name, device=device, variant=variant, params=params, paths=paths)
    fam = req.load_family()
    return build(fam, fam.pick_variants(device, variant)[0], req.params)[0]


def load_ipython_extension(ipython) -> None:
    """`%load_ext playground`: the %kplay and %%kplay magics (playground/magic.py; IPython only then)."""
    from .workshop.magic import load_ipython_extension as load

    load(ipython)


__all__ = ["run", "load", "make", "Request", "families", "find", "RunResult",
           "KplayError", "UsageError", "BuildError", "KernelCrash"]
