"""Capture what C/C++/CUDA code prints: at the file-descriptor level, where printf writes."""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from contextlib import contextmanager

_libc = ctypes.CDLL(None)


class Captured:
    text = ""


@contextmanager
def stdout_fd():
    """Redirect fd 1 to a temporary file for the block; the text is in the yielded object after it."""
    box = Captured()
    sys.stdout.flush()
    _libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield box
        finally:
            sys.stdout.flush()
            _libc.fflush(None)  # C stdio buffers; flush before handing fd 1 back
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            box.text = tmp.read().decode(errors="replace")
