"""The child process that runs a kernel: `python -m playground.worker FD`, the request (JSON) on stdin.

Events and the result go to FD as JSON lines; the kernel's own stdout and stderr go wherever the
parent pointed them. Whatever the kernel does to this process, the parent survives it.
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import sys
import traceback
import warnings


def main() -> None:
    out = os.fdopen(int(sys.argv[1]), "w", buffering=1)

    def send(**message) -> None:
        out.write(json.dumps(message) + "\n")

    faulthandler.enable()  # a segfault leaves a Python stack in the log
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found" on CPU boxes
    from . import runner
    from .errors import KplayError
    from .request import Request

    try:
        request = Request.from_json(sys.stdin.read())
        result = runner.execute(request, lambda event, **data: send(event=event, **data))
        send(result=result.to_dict())
    except KplayError as e:
        send(error={"kind": type(e).__name__, "message": str(e), "details": getattr(e, "details", [])})
    except Exception as e:  # a bug in a spec or in kplay: one line, the stack in the log
        traceback.print_exc()
        send(error={"kind": "KernelCrash", "message": f"{type(e).__name__}: {e}".splitlines()[0],
                    "details": traceback.format_exc().splitlines()[-6:]})

if __name__ == "__main__":
    main()
