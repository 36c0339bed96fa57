"""Can a kernel's input on the GPU be made read-only, so that a write it undoes still faults?

CUDA's virtual memory management maps physical memory at a reserved address with an access mode per device:
cuMemSetAccess with CU_MEM_ACCESS_FLAGS_PROT_READ. Here, in a child process each (a fault ends the context):
a tensor on such a mapping is read (torch.sum), then written in place. Prints what each step did.

    python benchmarks/readonly_gpu.py [--out FILE]
"""

import argparse
import subprocess
import sys

CHILD = r'''
import ctypes, sys, torch
torch.cuda.init(); torch.zeros(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0:
        name = ctypes.c_char_p(); cu.cuGetErrorName(r, ctypes.byref(name)); raise SystemExit(f"{what}: {name.value.decode()}")
class Location(ctypes.Structure): _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
class Access(ctypes.Structure): _fields_ = [("location", Location), ("flags", ctypes.c_int)]
prop = Prop(type=1, location=Location(type=1, id=torch.cuda.current_device()))  # pinned, on this device
gran = ctypes.c_size_t(); ok(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
n = 1 << 20; size = -(-n * 4 // gran.value) * gran.value
handle = ctypes.c_ulonglong(); ok(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)), "create")
ptr = ctypes.c_ulonglong(); ok(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "reserve")
ok(cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0)), "map")
def access(flags): ok(cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(Access(Location(1, torch.cuda.current_device()), flags)), ctypes.c_size_t(1)), f"set access {flags}")
access(3)  # read and write
class View:
    __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr.value, False), "version": 3}
x = torch.as_tensor(View(), device="cuda")
x.fill_(1.0); torch.cuda.synchronize()
access(1)  # read only
print("read:", x.sum().item(), flush=True)
if sys.argv[1] == "write":
    x.add_(1.0); torch.cuda.synchronize(); print("write: no fault", x.sum().item(), flush=True)
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    a = parser.parse_args()
    lines = ["# A read-only input on the GPU: cuMemSetAccess(PROT_READ) through CUDA's virtual memory management", ""]
    for step in ("read", "write"):
        done = subprocess.run([sys.executable, "-c", CHILD, step], capture_output=True, text=True, timeout=120)
        said = (done.stdout + done.stderr).strip().splitlines()
        lines.append(f"- {step}: exit {done.returncode}; " + " / ".join(said[-3:]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
