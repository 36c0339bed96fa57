"""@FAMILY@ (@VARIANT@), exported by kplay: `ops.<name>(...)` calls the compiled kernel.

The library registers its ops with PyTorch's dispatcher when it is loaded, so it is loaded as a
library (torch.ops.load_library) rather than imported as a Python module.
"""

from pathlib import Path

import torch

_library = next(Path(__file__).parent.glob("_ops*.so"))
torch.ops.load_library(str(_library))
ops = getattr(torch.ops, "@PACKAGE@")
__all__ = ["ops"]
