"""The device's peak figures, from its attributes: memory bandwidth and FLOP/s per dtype (the roofline's ceilings).

Bandwidth = 2 x memory clock x bus width / 8 (the memory is double data rate), as nvbench and torch's
GPULimits compute it. FLOP/s = SMs x max SM clock x FMAs per SM per clock x 2 (an FMA is two FLOPs): for
float32 and float64 on the CUDA cores, for bfloat16 and float16 on the tensor cores (dense, float32 sums),
where half-precision matrix work runs, and for TF32 (a float32 variant with math = "tf32"). A CPU has no peak here (None): kplay knows no portable way to read one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

# FMAs per SM per clock on the CUDA cores, by compute capability: the CUDA C++ Programming Guide's
# "Throughput of Native Arithmetic Instructions" (32- and 64-bit floating-point add, multiply, multiply-add).
FMA_PER_SM = {
    (6, 0): {"float32": 64, "float64": 32},
    (6, 1): {"float32": 128, "float64": 4},
    (7, 0): {"float32": 64, "float64": 32},
    (7, 5): {"float32": 64, "float64": 2},
    (8, 0): {"float32": 64, "float64": 32},
    (8, 6): {"float32": 128, "float64": 2},
    (8, 7): {"float32": 128, "float64": 2},
    (8, 9): {"float32": 128, "float64": 2},
    (9, 0): {"float32": 128, "float64": 64},
    (10, 0): {"float32": 128, "float64": 64},
    (12, 0): {"float32": 128, "float64": 2},
}

# Dense FMAs per SM per clock on the tensor cores, half-precision inputs with float32 sums: A100's 312 TFLOP/s
# is 108 SMs x 1,410 MHz x 1,024 x 2; Hopper's fourth-generation tensor cores do twice that per SM and clock.
# TF32 (float32 rounded to 10 mantissa bits), half of that: a float32 variant with math = "tf32" is judged by it.
TENSOR_FMA_PER_SM = {
    (8, 0): {"bfloat16": 1024, "float16": 1024, "tf32": 512},
    (9, 0): {"bfloat16": 2048, "float16": 2048, "tf32": 1024},
}

# cudaDeviceAttr values (driver_types.h); stable since CUDA 5 and still there in CUDA 13, which removed
# the clock fields from cudaDeviceProp.
ATTRIBUTES = {"sm_count": 16, "sm_clock_khz": 13, "mem_clock_khz": 36, "bus_bits": 37}


@dataclass(frozen=True)
class Peaks:
    """A device's ceilings: memory bandwidth, and FLOP/s for each dtype the table knows."""

    name: str
    bandwidth_gbps: float
    gflops: dict = field(default_factory=dict)  # dtype name -> GFLOP/s on the CUDA cores
    source: dict = field(default_factory=dict)  # "bandwidth" or a dtype -> the arithmetic, to check by hand

    def flops(self, dtype: str) -> float | None:
        return self.gflops.get(dtype)

    def roof(self, nbytes: float, flops: float, dtype: str) -> tuple[float, str] | None:
        """(seconds a call needs at the peak, 'memory' or 'compute': the ceiling that binds), or None."""
        times = {"memory": nbytes / (self.bandwidth_gbps * 1e9) if nbytes else 0.0}
        if flops and self.flops(dtype):
            times["compute"] = flops / (self.flops(dtype) * 1e9)
        bound = max(times, key=times.get)
        return (times[bound], bound) if times[bound] > 0 else None


TENSORS = ("bfloat16", "float16", "tf32")  # the rates above that are the tensor cores'; the rest, the CUDA cores'


def from_attributes(name: str, capability: tuple[int, int], sm_count: int, sm_clock_khz: int,
                    mem_clock_khz: int, bus_bits: int) -> Peaks:
    """The peaks from the attributes CUDA reports (clocks in kHz, as cudaDeviceGetAttribute gives them)."""
    bandwidth = 2 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9
    rates = FMA_PER_SM.get(tuple(capability), {}) | TENSOR_FMA_PER_SM.get(tuple(capability), {})
    gflops = {dtype: sm_count * sm_clock_khz * 1e3 * fma * 2 / 1e9 for dtype, fma in rates.items()}
    source = {"bandwidth": f"2 x {mem_clock_khz / 1e3:,.0f} MHz x {bus_bits:,} bits / 8"}
    source |= {dtype: f"{sm_count} SMs x {sm_clock_khz / 1e3:,.0f} MHz x {fma:,} FMA x 2"
               + (" (tensor cores, dense)" if dtype in TENSORS else "") for dtype, fma in rates.items()}
    return Peaks(name, bandwidth, gflops, source)


@functools.cache
def peaks(device: str = "cuda") -> Peaks | None:
    """The current GPU's peaks (cached), None on the CPU or where the attributes cannot be read."""
    if device != "cuda":
        return None
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    values = _attributes(props, index)
    if not all(values.values()):
        return None
    return from_attributes(props.name, (props.major, props.minor), **values)


def _attributes(props, index: int) -> dict:
    """SM count and clock, memory clock and bus width: from torch's properties where it has them (2.14 does),
    else from cudaDeviceGetAttribute in the CUDA runtime torch loaded."""
    from_torch = {"sm_count": "multi_processor_count", "sm_clock_khz": "clock_rate",
                  "mem_clock_khz": "memory_clock_rate", "bus_bits": "memory_bus_width"}
    values = {k: getattr(props, attr, None) for k, attr in from_torch.items()}
    missing = [k for k, v in values.items() if not v]
    if missing:
        values |= {k: _cuda_attribute(ATTRIBUTES[k], index) for k in missing}
    return values


def _cuda_attribute(attribute: int, index: int) -> int | None:
    import ctypes

    try:
        cudart = ctypes.CDLL(_cudart_path())
        value = ctypes.c_int(0)
        status = cudart.cudaDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(attribute), ctypes.c_int(index))
    except (OSError, AttributeError):
        return None
    return value.value if status == 0 else None


def _cudart_path() -> str:
    """The libcudart torch loaded (a second copy would be a second runtime), else the loader's."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "/libcudart.so" in path:
                    return path
    except OSError:
        pass
    return "libcudart.so"


@functools.cache
def nvml_handle():
    """(pynvml, handle, max SM MHz) of the current CUDA device, found by its UUID (NVML and CUDA number the
    GPUs differently), once per process; (None, None, None) without NVML."""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        return pynvml, handle, pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # no nvidia-ml-py, no NVML, or a device it does not know
        return None, None, None
