"""What each linear CUDA step costs in registers and shared memory, as ptxas reports it at build time.

    python benchmarks/registers.py [--out FILE]

Builds every CUDA step of linear through kplay (no GPU needed: nvcc alone) and reads each kernel's ptxas
record (compiler/kernel_resources.py): registers per thread, spills, static shared memory, per dtype and
arch. Dynamic shared memory is the launch's, not the compiler's: the steps that take it say how much in
their source (STAGES x the stage's bytes), and docs/kernels.md's table names it.
"""

from __future__ import annotations

import argparse

from common import emit  # first: it puts the repository on sys.path

from playground.compiler import build, kernel_resources
from playground.family import registry


def rows(family) -> list[str]:
    """A table row per step, kernel and dtype."""
    out = []
    for name, variant in family.variants.items():
        if variant.device != "cuda":
            continue
        _, info = build.build(family, variant, {})
        for k in kernel_resources.of_build(info.name):  # the highest arch it was built for
            dtypes = [d for d in variant.dtypes or family.dtypes if kernel_resources.for_dtype([k], d)]
            spills = k["spill_stores"] + k["spill_loads"]
            out.append(f"| `{name}` | {k['name']} | {', '.join(dtypes) or '-'} | {k['arch']} | {k['registers']} | "
                       f"{spills} | {k['shared_static']:,} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    family = registry.find("linear")
    lines = ["# linear's CUDA steps: registers and shared memory per kernel, from ptxas", "",
             "made by: python benchmarks/registers.py; kplay builds with nvcc, no GPU. Spills: "
             "bytes stored and loaded; static shared memory in bytes (dynamic: the launch's).", "",
             "| step | kernel | dtypes | arch | registers | spills | static shared |",
             "|---|---|---|---|---:|---:|---:|", *rows(family)]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
