"""A checked input in memory of its own, read-only while the kernel runs, between two zones of poison.

On the CPU the pages come from mmap and go read-only through mprotect: a write is a segfault. On a GPU they
come from CUDA's virtual memory management (cuMemCreate, cuMemMap) and go read-only through cuMemSetAccess:
a write is an illegal memory access. Either way a write the kernel undoes before it returns still faults,
which no before/after comparison can see; child/spawn.py reruns such a crash with writable inputs to tell a
write to the input from any other fault.
"""

from __future__ import annotations

import ctypes
import functools
import mmap

GUARD = 1024  # poisoned elements either side of each guarded input
PROT_READ, PROT_WRITE = 1, 2  # mprotect's; cuMemSetAccess's flags are the same bits (PROT_READ, PROT_READWRITE)


def can_guard(device: str) -> bool:
    """The CPU always; a GPU whose driver has virtual memory management."""
    return device == "cpu" or _driver() is not None


class Guarded:
    """The inputs, each tensor copied into memory of its own between two guard zones of poison, all of it
    read-only while the kernel runs: a read past the end takes the poison (NaN, or an int's extreme), a write
    past the end is named (`overrun`), and a write to the input faults, even one it undoes after."""

    def __init__(self, inputs, active: bool = True):
        self.inputs, self.overrun, self._zones, self.active = inputs, "", [], active

    def __enter__(self):
        import torch

        if not self.active:
            return self
        out = []
        for x in self.inputs:
            if not isinstance(x, torch.Tensor) or not x.numel():
                out.append(x)
                continue
            poison = float("nan") if x.is_floating_point() else torch.iinfo(x.dtype).min
            try:
                memory = (_Pages if x.device.type == "cpu" else _Mapping)((x.numel() + 2 * GUARD) * x.element_size(),
                                                                          x.device)
            except (RuntimeError, OSError):  # no memory to map it in: this case runs unguarded
                self.__exit__(None)
                self.active, self._zones = False, []
                return self
            self._zones.append(memory)
            whole = memory.tensor.view(x.dtype)
            whole.fill_(poison)
            whole[GUARD:GUARD + x.numel()] = x.flatten()
            memory.span = (whole, x.numel(), poison)
            out.append(whole[GUARD:GUARD + x.numel()].view(x.shape))
        self.inputs = tuple(out)
        for memory in self._zones:
            memory.protect(PROT_READ)
        return self

    def __exit__(self, failed, *_):
        import torch

        if not self.active:
            return False
        try:
            if failed and any(isinstance(m, _Mapping) for m in self._zones):
                return False  # a fault on a GPU ends its context: nothing more can run there
            for memory in self._zones:
                memory.protect(PROT_READ | PROT_WRITE)
            for k, memory in enumerate(self._zones):
                whole, n, poison = memory.span
                zones = torch.cat([whole[:GUARD], whole[GUARD + n:]])
                if not (zones.isnan().all() if zones.is_floating_point() else (zones == poison).all()):
                    self.overrun = f"input {k}: the kernel wrote past its end (or before its start)"
        finally:
            for memory in self._zones:
                memory.close(failed is None)
        return False


class _Pages:
    """Anonymous pages from mmap; mprotect sets their access."""

    def __init__(self, size: int, device):
        import torch

        self.memory = mmap.mmap(-1, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self.tensor, self.span = torch.frombuffer(self.memory, dtype=torch.uint8), None

    def protect(self, prot: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self.memory))
        if libc.mprotect(address, len(self.memory), prot) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")

    def close(self, _clean: bool) -> None:
        pass  # the tensor holds the buffer; the pages go with it


# ---- CUDA's virtual memory management, through the driver API ------------------------------------------

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


PINNED, ON_DEVICE, VMM_SUPPORTED = 1, 1, 102  # CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, the attribute


@functools.cache
def _driver():
    """libcuda where it has virtual memory management on the current device, else None."""
    import torch

    try:
        cu = ctypes.CDLL("libcuda.so.1")
        dev, supported = ctypes.c_int(), ctypes.c_int()
        ok = cu.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()) == 0 and \
            cu.cuDeviceGetAttribute(ctypes.byref(supported), VMM_SUPPORTED, dev) == 0
        return cu if ok and supported.value else None
    except (OSError, AttributeError):
        return None


class _Mapping:
    """Device memory mapped at an address of its own; cuMemSetAccess sets this device's access to it."""

    def __init__(self, size: int, device):
        import torch

        self.cu, self.device = _driver(), device.index if device.index is not None else torch.cuda.current_device()
        prop = _Prop(type=PINNED, location=_Location(ON_DEVICE, self.device))
        grain = ctypes.c_size_t()
        self._ok(self.cu.cuMemGetAllocationGranularity(ctypes.byref(grain), ctypes.byref(prop), 0))
        self.size = -(-size // grain.value) * grain.value
        self.handle, self.address = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        self._ok(self.cu.cuMemCreate(ctypes.byref(self.handle), ctypes.c_size_t(self.size), ctypes.byref(prop),
                                     ctypes.c_ulonglong(0)))
        self._ok(self.cu.cuMemAddressReserve(ctypes.byref(self.address), ctypes.c_size_t(self.size), ctypes.c_size_t(0),
                                             ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)))
        self._ok(self.cu.cuMemMap(self.address, ctypes.c_size_t(self.size), ctypes.c_size_t(0), self.handle,
                                  ctypes.c_ulonglong(0)))
        self.protect(PROT_READ | PROT_WRITE)
        interface = {"shape": (self.size,), "typestr": "|u1", "data": (self.address.value, False), "version": 3}
        self.tensor = torch.as_tensor(type("View", (), {"__cuda_array_interface__": interface})(), device=device)
        self.span = None  # (the whole as the input's dtype, its elements, the poison), set by Guarded

    def protect(self, prot: int) -> None:
        import torch

        torch.cuda.synchronize(self.device)  # no copy or kernel still running on it while its access changes
        access = _Access(_Location(ON_DEVICE, self.device), prot)
        self._ok(self.cu.cuMemSetAccess(self.address, ctypes.c_size_t(self.size), ctypes.byref(access), ctypes.c_size_t(1)))

    def close(self, clean: bool) -> None:
        """Unmapped and freed; after a fault (not `clean`) left as it is, since the context cannot run more."""
        if clean:
            self.tensor = self.span = None
            self.cu.cuMemUnmap(self.address, ctypes.c_size_t(self.size))
            self.cu.cuMemAddressFree(self.address, ctypes.c_size_t(self.size))
            self.cu.cuMemRelease(self.handle)

    def _ok(self, result: int) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.cu.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"CUDA's virtual memory management failed: {(name.value or b'?').decode()}")
