"""Each CUDA kernel's resources, from ptxas at build time, and the occupancy its launches get on a GPU.

The build's part (registers, spills, shared, local and constant memory) is parsed from ptxas's `-v` lines
once, and kept beside the built library as resources.json: a cached build reads it back in milliseconds.
The launch's part comes from one profiled call (CUPTI's kernel records, through torch.profiler): the real
grid, block and dynamic shared memory of every kernel the call launched, which no template parameter tells.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.names import short_name
from .toolchain import COMPILER_LOG, cuda_home, folder

FILE = "resources.json"  # beside the build's .so: its kernels, parsed once from the compiler's log

# ptxas info    : Compiling entry function '_Z15sum_tree_kernelIfEvPKT_lPS0_' for 'sm_90'
ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>\w+)'")
PROPS = re.compile(r"Function properties for (?P<name>\S+)")
# 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads")
# Used 16 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]  (smem and cmem only when not 0)
USED = re.compile(r"Used (?P<regs>\d+) registers")


def parse_ptxas(text: str) -> list[dict]:
    """One record per kernel and arch from ptxas's -v lines (device functions have no record of their own)."""
    kernels, current, props_of = [], None, None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            current = dict(mangled=m["name"], arch=m["arch"], registers=0, barriers=0, shared_static=0,
                           constant=0, stack=0, spill_stores=0, spill_loads=0)
            kernels.append(current)
        elif m := PROPS.search(line):
            props_of = m["name"]
        elif (m := FRAME.search(line)) and current and props_of == current["mangled"]:
            current.update(stack=int(m["stack"]), spill_stores=int(m["stores"]), spill_loads=int(m["loads"]))
        elif (m := USED.search(line)) and current:
            current["registers"] = int(m["regs"])
            current["barriers"] = _bytes(line, r"used (\d+) barriers")
            current["shared_static"] = _bytes(line, r"(\d+) bytes smem")
            current["constant"] = sum(int(n) for n in re.findall(r"(\d+) bytes cmem\[\d+\]", line))
            current = None  # the Used line closes the entry
    return kernels


def _bytes(line: str, pattern: str) -> int:
    m = re.search(pattern, line)
    return int(m[1]) if m else 0


def demangle(names: list[str]) -> dict[str, str]:
    """{mangled: demangled} by c++filt (or CUDA's cu++filt); a name no tool reads stays as it is."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt", path=os.path.join(cuda_home() or "/usr/local/cuda", "bin"))
    if not names or not tool:
        return {n: n for n in names}
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def _parsed(where: Path) -> list[dict]:
    """The build's kernels from its compiler's log (none for a C++ build), kept in FILE for the next read."""
    try:
        kernels = parse_ptxas((where / COMPILER_LOG).read_text())
    except OSError:
        return []
    readable = demangle(sorted({k["mangled"] for k in kernels}))
    for k in kernels:
        k["signature"] = readable[k["mangled"]]
        k["name"] = short_name(k["signature"])
    try:
        (where / FILE).write_text(json.dumps({"kernels": kernels}, indent=1))
    except OSError:  # a read-only cache: parsed again next time
        pass
    return kernels


def of_build(build_name: str, arch: str | None = None) -> list[dict]:
    """A cached build's kernels for one arch: `arch` where it was compiled for it, else its last (highest).

    Read from ptxas's lines in the compiler's log, demangled, once; then from FILE beside it.
    """
    where = folder(build_name) if build_name else None
    try:
        kernels = json.loads((where / FILE).read_text())["kernels"]
    except (OSError, ValueError, KeyError, TypeError):
        kernels = _parsed(where) if where else []
    archs = [k["arch"] for k in kernels]
    pick = arch if arch in archs else (archs[-1] if archs else None)
    return [k for k in kernels if k["arch"] == pick]


SPELLINGS = {"float32": ("float",), "float64": ("double",), "float16": ("half", "__half", "Half"),
             "bfloat16": ("__nv_bfloat16", "BFloat16", "bfloat16"), "int32": ("int", "int32_t"),
             "int64": ("long", "int64_t")}  # a dtype's C++ types, as template arguments spell them


def for_dtype(kernels: list[dict], dtype: str) -> list[dict]:
    """Without a GPU to say which kernels ran: leave out the template instances for another dtype.

    A kernel whose template arguments name the run's C++ type stays, and so does one that names none. They
    are read from the whole signature where there is one: a long short name elides them (`k<...>`).
    """
    def dtypes(k: dict) -> set[str]:
        args = k.get("signature", k["name"]).partition("(")[0].partition("<")[2]
        return {d for d, names in SPELLINGS.items() if any(re.search(rf"\b{n}\b", args) for n in names)}

    return [k for k in kernels if not dtypes(k) or dtype in dtypes(k)]


# ---- names ---------------------------------------------------------------------------------------------

def key(signature: str) -> str:
    """The same kernel in c++filt's and the profiler's spelling: no spaces, no leading 'void'."""
    return re.sub(r"\s+", "", signature).removeprefix("void")


# ---- occupancy ---------------------------------------------------------------------------------------

# Resident blocks per SM by compute capability (CUDA C++ Programming Guide, "Compute Capabilities").
MAX_BLOCKS = {(7, 5): 16, (8, 6): 16, (8, 7): 16, (8, 9): 24}  # 32 on the others from sm_70 (sm_80, sm_90, ...)
REG_UNIT = 256  # registers are allocated per warp, in units of 256 (sm_70 and later)
SUB_PARTITIONS = 4  # an SM's register file is split among 4 schedulers; a warp's registers sit in one
REGS_PER_BLOCK = 65536  # the most registers one block may hold (every arch from sm_70)


@dataclass(frozen=True)
class Device:
    """What occupancy depends on, from torch.cuda.get_device_properties (the same fields in torch 2.11 and 2.14)."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    warp_size: int
    max_threads_per_multi_processor: int
    regs_per_multiprocessor: int
    shared_memory_per_multiprocessor: int
    shared_memory_per_block_optin: int

    @classmethod
    def current(cls) -> Device:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return cls(**{f: getattr(props, f) for f in cls.__dataclass_fields__})

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"


H200 = Device("NVIDIA H200", 9, 0, 132, 32, 2048, 65536, 233472, 232448)  # as torch 2.11 reports it


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(threads: int, registers: int, shared: int, gpu: Device) -> dict:
    """Theoretical blocks per SM and occupancy of a launch, and the resource that limits it (warps first on a tie).

    `shared` is the block's static + dynamic shared memory. The arithmetic of NVIDIA's occupancy calculator
    (cuda_occupancy.h) with the shared-memory carveout at its largest: registers per warp rounded up to 256,
    each of the 4 sub-partitions holding whole warps; 1 KB of shared memory reserved per block from sm_80,
    allocated in units of 128 bytes. 0 blocks: the launch cannot run (too many registers or too much memory).
    """
    warp = gpu.warp_size
    warps = -(-threads // warp)
    max_warps = gpu.max_threads_per_multi_processor // warp
    regs_warp = _round_up(registers * warp, REG_UNIT)
    if regs_warp * _round_up(warps, SUB_PARTITIONS) > REGS_PER_BLOCK:
        by_regs = 0
    else:
        by_regs = (gpu.regs_per_multiprocessor // SUB_PARTITIONS // regs_warp) * SUB_PARTITIONS // warps if regs_warp else max_warps
    reserved, unit = (1024, 128) if gpu.major >= 8 else (0, 256)
    need = _round_up(shared + reserved, unit)
    by_smem = 0 if shared > gpu.shared_memory_per_block_optin else gpu.shared_memory_per_multiprocessor // need
    limits = {"warps": max_warps // warps, "blocks": MAX_BLOCKS.get((gpu.major, gpu.minor), 32),
              "registers": by_regs, "shared memory": by_smem}
    blocks = min(limits.values())
    return {"blocks_per_sm": blocks, "percent": round(100 * blocks * warps / max_warps, 1),
            "limit": next(name for name, n in limits.items() if n == blocks), "limits": limits}


# ---- launches ----------------------------------------------------------------------------------------

def launches(trace_events: list[dict]) -> list[dict]:
    """The kernel records of a chrome trace, one per kernel and block shape, in launch order.

    A multi-pass rung launches one kernel several times with shrinking grids: the grid shown is the
    longest launch's, with the count and the total GPU time of all of them.
    """
    out: dict[tuple, dict] = {}
    for e in trace_events:
        if e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        who = (key(e["name"]), tuple(a.get("block", ())), a.get("shared memory", 0))
        seen = out.get(who)
        if seen is None:
            seen = out[who] = dict(signature=e["name"], name=short_name(e["name"]), grid=a.get("grid"),
                                   block=a.get("block"), registers=a.get("registers per thread"),
                                   shared=a.get("shared memory", 0), count=0, gpu_s=0.0, longest_s=0.0)
        dur = e.get("dur", 0) * 1e-6  # the trace counts microseconds
        if dur > seen["longest_s"]:
            seen.update(grid=a.get("grid"), longest_s=dur)
        seen["count"] += 1
        seen["gpu_s"] += dur
    return [{k: v for k, v in r.items() if k != "longest_s"} for r in out.values()]


def trace(call) -> dict:
    """The chrome trace of one torch.profiler pass over call() (CUPTI activity records: no privileges; the
    trace has the launch records on every torch). CUPTI is finalized after it (TEARDOWN_CUPTI), or every
    later launch in this process would pay its overhead (pytorch/pytorch#144455)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    with tempfile.TemporaryDirectory() as tmp:
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


GPU_WORK = ("kernel", "gpu_memset", "gpu_memcpy")  # a chrome trace's categories of work done on the GPU
SEPARATOR = "spin_kernel"  # torch.cuda._sleep's kernel, launched between the calls of one pass


def trace_each(calls: list) -> list[list[dict]]:
    """The GPU work (trace events, in launch order) of each call, from one torch.profiler pass: CUPTI is
    set up and torn down once, as a second pass after a teardown records no kernels (torch 2.11 on the
    H200). A short spin kernel, each call after it, marks where one call's work ends and the next begins."""
    import torch

    def each() -> None:
        for call in calls:
            torch.cuda._sleep(1000)
            torch.cuda.synchronize()
            call()
            torch.cuda.synchronize()

    return split(trace(each).get("traceEvents", []), len(calls))


def split(trace_events: list[dict], count: int) -> list[list[dict]]:
    """The GPU work after each of the `count` separators, in launch order."""
    groups = after_separators(sorted((e for e in trace_events if e.get("cat") in GPU_WORK), key=lambda e: e["ts"]))
    if len(groups) != count:
        raise RuntimeError(f"the profiler saw {len(groups)} of {count} calls")
    return groups


def after_separators(launches: list[dict]) -> list[list[dict]]:
    """The launches (each with a "name", in launch order) after each SEPARATOR, one list per separator."""
    groups = []
    for e in launches:
        if SEPARATOR in e["name"]:
            groups.append([])
        elif groups:
            groups[-1].append(e)
    return groups


def launched(built: list[dict], records: list[dict], gpu: Device) -> list[dict]:
    """The launched kernels, each with its build's resources (where the build has it) and its occupancy."""
    by_key = {key(k["signature"]): k for k in built}
    out = []
    for r in records:
        threads = 1
        for d in r["block"] or [1]:
            threads *= d
        own = by_key.get(key(r["signature"]), {"name": r["name"], "signature": r["signature"]})
        regs = r["registers"] if r["registers"] is not None else own.get("registers", 0)
        out.append({**own, "launch": r, "occupancy": {**occupancy(threads, regs, r["shared"], gpu), "gpu": gpu.name}})
    return out
