"""Each CUDA kernel's resources (ptxas, at build time) and occupancy (its launches, on a GPU), in every run."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from playground.family import registry

from playground.compiler import kernel_resources as resources
from playground.core.names import short_name
from playground.report.tables import kernel_lines
from playground.compiler.kernel_resources import H200, occupancy

ROOT = Path(__file__).resolve().parent.parent
FAMILY = registry.find("sum")
NCU_CONFIG = dataclasses.replace(H200, shared_memory_per_multiprocessor=32768)  # ncu's carveout: 32 KB

# ptxas -v of a build for two archs (nvcc 13.0 here): a module constant, a kernel that spills, one with a
# stack of its own, a device function whose properties are not a kernel's.
PTXAS = """\
[1/3] /usr/local/cuda/bin/nvcc --resource-usage -c cuda.cu -o cuda.cuda.o
ptxas info    : 0 bytes gmem, 256 bytes cmem[3]
ptxas info    : Compiling entry function '_Z5heavyPfi' for 'sm_80'
ptxas info    : Function properties for _Z5heavyPfi
    9520 bytes stack frame, 12376 bytes spill stores, 15764 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 9520 bytes cumulative stack size, 364 bytes cmem[0]
ptxas info    : Compile time = 1276.542 ms
ptxas info    : Compiling entry function 'plain' for 'sm_80'
ptxas info    : Function properties for plain
    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 364 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Function properties for _Z6helperPfi
    64 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5heavyPfi' for 'sm_90'
ptxas info    : Function properties for _Z5heavyPfi
    9528 bytes stack frame, 12384 bytes spill stores, 15772 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 9528 bytes cumulative stack size
[2/3] c++ -c main.cpp -o main.o
"""


def test_ptxas_lines_give_each_kernel_per_arch_and_skip_device_functions():
    kernels = resources.parse_ptxas(PTXAS)
    assert [(k["mangled"], k["arch"]) for k in kernels] == [("_Z5heavyPfi", "sm_80"), ("plain", "sm_80"),
                                                            ("_Z5heavyPfi", "sm_90")]
    heavy, plain, heavy90 = kernels
    assert (heavy["registers"], heavy["stack"], heavy["spill_stores"], heavy["spill_loads"]) == (32, 9520, 12376, 15764)
    assert (heavy["shared_static"], heavy["constant"], heavy["barriers"]) == (0, 364, 0)
    assert (plain["registers"], plain["shared_static"], plain["constant"], plain["barriers"]) == (40, 1024, 372, 1)
    assert (plain["stack"], plain["spill_stores"]) == (128, 0)  # the helper's 4-byte spills are not plain's
    assert (heavy90["stack"], heavy90["constant"]) == (9528, 0)


def test_names_lose_return_type_parameters_and_namespaces_and_long_template_arguments():
    assert short_name("void sum_tree_kernel<float>(float const*, long, float*)") == "sum_tree_kernel<float>"
    assert short_name("plain") == "plain" and short_name("heavy(float*, int)") == "heavy"
    assert short_name("sum(torch::stable::Tensor) [clone .cold]") == "sum"
    assert short_name("std::ctype<char>::do_widen(char) const") == "do_widen"
    assert short_name("X::f() const volatile &&") == "f"
    torch_sum = next(e["name"] for e in profiled()["torch.sum"] if e["cat"] == "kernel")
    assert short_name(torch_sum) == "reduce_kernel<512, 1, ReduceOp<...>>"
    gemm = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    assert short_name(f"void {gemm}<true>(Params)") == gemm[:37] + "..."
    assert resources.key("void k<float>(float const*, long)") == resources.key("void k<float>(float const *, long)")


def test_for_dtype_keeps_the_runs_template_instances_and_untyped_kernels():
    kernels = [{"name": n} for n in ("k<float>", "k<double>", "plain", "v<float4>", "w<4, double>")]
    assert [k["name"] for k in resources.for_dtype(kernels, "float32")] == ["k<float>", "plain", "v<float4>"]
    assert [k["name"] for k in resources.for_dtype(kernels, "float64")] == ["k<double>", "plain", "v<float4>", "w<4, double>"]
    half = [{"name": "k<__half>"}, {"name": "k<c10::Half>"}, {"name": "k<float>"}]
    assert [k["name"] for k in resources.for_dtype(half, "float16")] == ["k<__half>", "k<c10::Half>"]
    elided = [{"name": f"{name}<...>", "signature": f"void ns::{name}<{t}>({t} const*, long)"}
              for name, t in (("matmul_nt_warp_specialized", "__nv_bfloat16"), ("matmul_nt_warp_specialized", "__half"))]
    assert [k["signature"] for k in resources.for_dtype(elided, "bfloat16")] == [elided[0]["signature"]]


@pytest.mark.parametrize("threads, regs, smem, blocks, percent, limit", [
    (256, 16, 1024, 8, 100.0, "warps"),  # the tree rung at 256 threads
    (1024, 64, 0, 1, 50.0, "registers"),  # 2048 registers a warp: 32 warps fill the register file
    (1024, 65, 0, 0, 0.0, "registers"),  # 2304 a warp (rounded to 256) x 32 warps > 65536: the launch fails
    (1024, 32, 0, 2, 100.0, "warps"),  # warps and registers tie: warps named, as at 100% nothing else limits
    (32, 16, 0, 32, 50.0, "blocks"),  # one-warp blocks: 32 blocks per SM fill half the warps
    (256, 16, 48 * 1024, 4, 50.0, "shared memory"),  # (48 KB + 1 KB reserved) x 4 of 228 KB
    (256, 16, 232449, 0, 0.0, "shared memory"),  # more than a block may opt in to
])
def test_occupancy_on_the_h200(threads, regs, smem, blocks, percent, limit):
    occ = occupancy(threads, regs, smem, H200)
    assert (occ["blocks_per_sm"], occ["percent"], occ["limit"]) == (blocks, percent, limit), occ


@pytest.mark.parametrize("threads, regs, smem, limits", [
    # ncu's Occupancy section on the H200 (torch.sum, tree and fast at n = 1e8), its carveout at 32 KB:
    # Block Limit Warps, SM, Registers, Shared Mem; all three at 100% theoretical occupancy.
    (512, 32, 2064, {"warps": 4, "blocks": 32, "registers": 4, "shared memory": 10}),
    (256, 16, 1024, {"warps": 8, "blocks": 32, "registers": 16, "shared memory": 16}),
    (256, 32, 33, {"warps": 8, "blocks": 32, "registers": 8, "shared memory": 28}),  # 33 + 1024 rounds to 1152
])
def test_occupancy_limits_match_nsight_compute(threads, regs, smem, limits):
    occ = occupancy(threads, regs, smem, NCU_CONFIG)
    assert occ["limits"] == limits and occ["percent"] == 100.0 and occ["limit"] == "warps"


def profiled() -> dict:
    """torch.profiler's kernel records of one call each at n = 1e8 on the H200 (benchmarks/insight_raw.py)."""
    return json.loads((ROOT / "tests" / "data" / "profiled-sum-1e8.json").read_text())


def test_profiler_records_become_one_launch_per_kernel_with_the_longest_grid():
    assert [k["name"] for k in resources.launches(profiled()["fast"])] == ["sum_fast_kernel<float>"]  # no memset
    tree = resources.launches(profiled()["tree"])
    assert len(tree) == 1, tree
    (k,) = tree
    assert (k["name"], k["block"], k["grid"], k["count"], k["registers"], k["shared"]) == (
        "sum_tree_kernel<float>", [256, 1, 1], [390625, 1, 1], 4, 16, 1024)
    assert k["gpu_s"] == pytest.approx(sum(e["dur"] for e in profiled()["tree"]) * 1e-6)


def test_launched_kernels_join_the_builds_resources_by_signature():
    built = [dict(mangled="_Z15sum_tree_kernelIfEvPKT_lPS0_", arch="sm_90", registers=12, barriers=1,
                  shared_static=1024, constant=0, stack=0, spill_stores=0, spill_loads=0,
                  signature="void sum_tree_kernel<float>(float const*, long, float*)", name="sum_tree_kernel<float>")]
    (k,) = resources.launched(built, resources.launches(profiled()["tree"]), H200)
    assert k["registers"] == 12 and k["launch"]["registers"] == 16  # ptxas's count; the profiler's, allocated in 8s
    assert k["occupancy"]["blocks_per_sm"] == 8 and k["occupancy"]["gpu"] == "NVIDIA H200"
    (base,) = resources.launched([], resources.launches(profiled()["torch.sum"]), H200)
    assert "spill_stores" not in base and base["occupancy"]["limit"] == "warps"


def report(**contenders) -> dict:
    variants = [{"variant": n, "kernels": k} for n, k in contenders.items() if n != "torch_sum"]
    return {"variants": variants, "baselines": {"torch.sum": {"kernels": contenders.get("torch_sum", [])}}}


def test_the_run_report_has_a_line_per_kernel_or_two_with_the_launch_within_80_columns():
    built = resources.parse_ptxas(PTXAS)
    for k in built:
        k["signature"] = k["name"] = k["mangled"]
    no_gpu = [str(t) for t in kernel_lines(report(first_add=built[:2]))]
    assert no_gpu[0] == "kernels, from ptxas (sm_80)"
    assert no_gpu[1:3] == ["first_add _Z5heavyPfi  32 regs · 0 B smem · spill 12 KB st, 15 KB ld",
                           "          9.3 KB stack"]  # past 80 columns: the rest under the name
    assert no_gpu[3] == "first_add plain        40 regs · 1.0 KB smem · 0 spill · 128 B stack"  # names aligned
    tree = resources.launched([], resources.launches(profiled()["tree"]), H200)
    base = resources.launched([], resources.launches(profiled()["torch.sum"]), H200)
    lines = [str(t) for t in kernel_lines(report(tree=tree, torch_sum=base))]
    assert lines[0].startswith("kernels launched by one call on NVIDIA H200")
    assert lines[1:3] == [f"tree      {'sum_tree_kernel<float>':<36}  16 regs · 1.0 KB smem",
                          "          256 thr × 390,625 blk (4 launches) · 8 blk/SM, occupancy 100% (warps)"]
    assert lines[3].startswith("torch.sum reduce_kernel<512, 1, ReduceOp<...>>")
    assert max(map(len, lines + no_gpu)) <= 80
    assert kernel_lines(report(cpp=[])) == []


def test_a_call_that_launches_many_kernels_shows_the_busiest_four_in_launch_order():
    (tree,) = resources.launched([], resources.launches(profiled()["tree"]), H200)
    many = [{**tree, "name": f"k{i}", "launch": {**tree["launch"], "gpu_s": t}} for i, t in enumerate([5, 1, 4, 3, 2, 6])]
    lines = [str(t) for t in kernel_lines(report(cuda=many))]
    assert [line.split()[1] for line in lines[1:-1:2]] == ["k0", "k2", "k3", "k5"]
    assert lines[-1] == "     and 2 more kernels (--json lists them)"


TREE_PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z15sum_tree_kernelIdEvPKT_lPS0_' for 'sm_90'
ptxas info    : Function properties for _Z15sum_tree_kernelIdEvPKT_lPS0_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function '_Z15sum_tree_kernelIfEvPKT_lPS0_' for 'sm_90'
ptxas info    : Function properties for _Z15sum_tree_kernelIfEvPKT_lPS0_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem
"""


def test_the_runner_gives_each_contender_its_profiled_kernels_and_the_report_shows_them(monkeypatch):
    """The GPU path of runner.launches with the H200's records in place of the profiler, up to the report."""
    from rich.console import Console

    from playground.run import runner
    from playground.compiler.toolchain import COMPILER_LOG, folder
    from playground.core.record import BuildInfo, Check
    from playground.report.tables import run_report
    from playground.core.record import BaselineResult, RunResult, VariantResult

    where = folder("kplay_sum_tree_fake")
    where.mkdir(parents=True, exist_ok=True)
    (where / COMPILER_LOG).write_text(TREE_PTXAS)
    monkeypatch.setattr(resources.Device, "current", classmethod(lambda cls: H200))
    monkeypatch.setattr(resources, "trace_each", lambda calls: [profiled()[call()[0]] for call in calls])
    check = Check(True, 0.0, 1.0, "tree bound", [], ["n=100000000"])
    tree = VariantResult(variant="tree", note="", build=BuildInfo("kplay_sum_tree_fake", 0.0, True), check=check)
    result = RunResult("sum", "cuda", "float32", 0, {"n": 10**8}, {"threads": 256}, "2.11",
                       baselines={"torch.sum": BaselineResult(name="torch.sum")}, variants=[tree])
    runner.launches(result, {("variant", "tree"): {"sum": lambda: "tree"}, ("baseline", "torch.sum"): {"sum": lambda: "torch.sum"}})
    assert not result.warnings
    (k,) = tree.kernels
    assert (k["name"], k["registers"], k["launch"]["count"], k["occupancy"]["limit"]) == ("sum_tree_kernel<float>", 12, 4, "warps")
    assert [b["name"] for b in result.baselines["torch.sum"].kernels] == ["reduce_kernel<512, 1, ReduceOp<...>>"]
    console = Console(width=80, record=True, color_system=None)
    console.print(run_report(json.loads(json.dumps(result.to_dict()))))
    text = console.export_text()
    assert "256 thr × 390,625 blk (4 launches) · 8 blk/SM, occupancy 100% (warps)" in text, text
    assert max(map(len, text.splitlines())) <= 80


def test_a_profiler_that_fails_is_a_warning_not_a_failed_run(monkeypatch):
    from playground.run import runner
    from playground.core.record import BaselineResult, RunResult

    def broken(calls):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED\nmore")

    monkeypatch.setattr(resources.Device, "current", classmethod(lambda cls: H200))
    monkeypatch.setattr(resources, "trace_each", broken)
    result = RunResult("sum", "cuda", "float32", 0, {"n": 1}, {}, "2.11",
                       baselines={"torch.sum": BaselineResult(name="torch.sum")})
    runner.launches(result, {("baseline", "torch.sum"): {"sum": lambda: None}})
    assert result.warnings == ["kernel launches not profiled: CUPTI_ERROR_NOT_INITIALIZED"] and result.ok


@pytest.fixture(scope="module")
def built_sum():
    """name(variant, threads): the build of sum's tree or fast compiled here (no GPU needed), once each."""
    from playground.compiler.build import build
    names = {}

    def name(variant: str, threads: int) -> str:
        if (variant, threads) not in names:
            _, info = build(FAMILY, FAMILY.variants[variant], FAMILY.parse_params([f"threads={threads}"]))
            names[variant, threads] = info.name
        return names[variant, threads]

    return name


@pytest.mark.nvcc
@pytest.mark.parametrize("variant, threads", [("fast", 256),  # as test_sum_cuda's compile: -m "not slow" builds one rung
                                              *(pytest.param(v, t, marks=pytest.mark.slow)
                                                for v, t in (("tree", 256), ("tree", 1024), ("fast", 1024)))])
def test_a_real_build_keeps_each_kernels_resources(built_sum, variant, threads):
    kernels = resources.of_build(built_sum(variant, threads))
    names = {k["name"] for k in kernels}
    assert names == {f"sum_{variant}_kernel<float>", f"sum_{variant}_kernel<double>"}, kernels
    for k in kernels:
        assert isinstance(k["registers"], int) and 0 < k["registers"] <= 255
        assert k["arch"] == "sm_90" and k["spill_stores"] == 0 and k["signature"].startswith(f"void sum_{variant}_kernel<")
    tree_float = next(k for k in kernels if k["name"].endswith("<float>"))
    if variant == "tree":  # __shared__ T s[kThreads]: the shared memory follows --param threads
        assert tree_float["shared_static"] == 4 * threads
    else:  # one float per warp, and a flag
        assert tree_float["shared_static"] == 4 * threads // 32 + 1


@pytest.mark.nvcc
@pytest.mark.slow  # one more nvcc build
def test_an_ejected_rung_with_its_kernel_renamed_reports_the_new_name(kplay, tmp_path):
    from playground.compiler.build import build
    folder = tmp_path / "mine"
    assert kplay("eject", "sum", folder, "--variant", "tree", "--param", "threads=512", "--solution").exit_code == 0
    source = folder / "sum_tree.cu"
    source.write_text(source.read_text().replace("sum_tree_kernel", "my_sum"))
    fam = registry.find(str(folder))
    _, info = build(fam, fam.variants["tree"], fam.parse_params([]))
    (k,) = resources.for_dtype(resources.of_build(info.name), "float32")
    assert k["name"] == "my_sum<float>" and k["shared_static"] == 4 * 512, k


@pytest.mark.nvcc
def test_a_cached_build_reads_its_resources_back_in_well_under_a_tenth_of_a_second(built_sum):
    """In a fresh process, after a cache hit: the resources cost a read of resources.json, no compiler."""
    built_sum("fast", 256)  # the build the fresh process then finds in the cache
    code = ("import time, torch\nfrom playground.family import registry\nfrom playground.compiler import kernel_resources as resources\nfrom playground.compiler.build import build\n"
            "fam = registry.find('sum')\nt0 = time.perf_counter()\n"
            "_, info = build(fam, fam.variants['fast'], fam.parse_params([]))\n"
            "t = time.perf_counter()\nk = resources.for_dtype(resources.of_build(info.name), 'float32')\n"
            "print(info.cached, t - t0, len(k), time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    cached, build_s, count, seconds = out.split()
    assert cached == "True" and count == "1" and float(seconds) < 0.1, out
    print(f"cached build {build_s} s, its kernels' resources {float(seconds) * 1e3:.2f} ms")


@pytest.mark.nvcc
def test_a_compile_error_still_points_at_the_students_cu_file(tmp_path):
    import shutil

    from playground.compiler.build import build
    from playground.core.errors import BuildError

    folder = tmp_path / "sum"
    shutil.copytree(FAMILY.path, folder)
    source = folder / "sum_tree.cu"
    lines = source.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if "__syncthreads();" in text)
    lines[line] = lines[line].replace("__syncthreads();", "__syncthreadz();")
    source.write_text("\n".join(lines) + "\n")
    fam = registry.find(str(folder))
    with pytest.raises(BuildError) as failed:
        build(fam, fam.variants["tree"], fam.parse_params([]))
    assert f"compile error in sum_tree.cu:{line + 1}" in str(failed.value), (str(failed.value), failed.value.details)


@pytest.mark.cuda
def test_every_rungs_kernels_have_their_launch_and_occupancy_on_the_gpu(kplay):
    result = kplay("run", "sum", "--device", "cuda", "--variant", "all", "--n", "1e6", "--json")
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert not [w for w in r["warnings"] if "profiled" in w], r["warnings"]
    for v in r["variants"]:
        assert v["kernels"], v["variant"]
        own = [k for k in v["kernels"] if k["name"].startswith("sum_")]
        assert own and all(k["registers"] > 0 and "spill_stores" in k for k in own), v["kernels"]
        for k in v["kernels"]:
            assert k["launch"]["block"][0] == 256 and k["launch"]["count"] >= 1, k
            assert 0 < k["occupancy"]["blocks_per_sm"] <= 32 and 0 < k["occupancy"]["percent"] <= 100, k
            assert k["occupancy"]["limit"] in ("warps", "registers", "shared memory", "blocks"), k
    assert r["baselines"]["torch.sum"]["kernels"], r["baselines"]
    text = kplay("run", "sum", "--device", "cuda", "--variant", "all", "--n", "1e6").stdout
    assert "occupancy" in text and "sum_fast_kernel<float>" in text, text


@pytest.mark.cuda
def test_the_launch_follows_param_threads_on_the_gpu(kplay):
    result = kplay("run", "sum", "--device", "cuda", "--variant", "tree", "--n", "1e6", "--param", "threads=1024", "--json")
    assert result.exit_code == 0, result.output
    (k,) = json.loads(result.stdout)["variants"][0]["kernels"]
    assert k["name"] == "sum_tree_kernel<float>" and k["shared_static"] == 4096, k
    assert k["launch"]["block"] == [1024, 1, 1] and k["launch"]["grid"] == [977, 1, 1] and k["launch"]["count"] == 2, k
    assert (k["occupancy"]["blocks_per_sm"], k["occupancy"]["percent"], k["occupancy"]["limit"]) == (2, 100.0, "warps"), k
