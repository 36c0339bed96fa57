"""kplay's engine: find a kernel family, build it, check it against PyTorch, time it.

    import playground
    result = playground.run("sum", sizes={"n": 10_000_000}, device="cpu")   # in this process
    ops = playground.load("sum")            # torch.ops namespace of the compiled snippet
    ops.sum(torch.randn(1000))

`%load_ext playground` in Jupyter loads the %kplay and %%kplay magics (playground/notebook.py).
"""

from .core.errors import BuildError, KernelCrash, KplayError, UsageError
from .core.record import RunResult
from .family.registry import families, find
from .family.request import Request, make
from .notebook import load_ipython_extension
from .run.runner import load, run

__all__ = ["run", "load", "make", "Request", "families", "find", "RunResult", "load_ipython_extension",
           "KplayError", "UsageError", "BuildError", "KernelCrash"]
