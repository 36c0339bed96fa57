"""kplay's engine: find a kernel family, build it, check it against PyTorch, time it.

    import playground
    result = playground.run("sum", sizes={"n": 10_000_000}, device="cpu")
    ops = playground.load("sum")            # torch.ops namespace of the compiled snippet
    ops.sum(torch.randn(1000))
"""

from .errors import BuildError, KernelCrash, KplayError, UsageError
from .registry import families, find
from .runner import RunResult, plan, run


def load(name: str, variant: str | None = None, device: str = "cpu", params: dict | None = None,
         paths: list[str] | None = None):
    """Build (or reuse) one variant and return its ops, ready to call on tensors."""
    from .build import build

    p = plan(name, device=device, variant=variant, params=params, paths=paths)
    v = p.family.pick_variants(device, variant)[0]
    return build(p.family, v, p.params)[0]


__all__ = ["run", "load", "plan", "families", "find", "RunResult",
           "KplayError", "UsageError", "BuildError", "KernelCrash"]
