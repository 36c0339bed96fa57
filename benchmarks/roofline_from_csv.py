"""A roofline PNG from a sweep's CSV (`kplay bench --csv`), the peaks from a device's attributes.

    python3 benchmarks/roofline_from_csv.py benchmarks/results/2026-11-29-8be12cf-h200-linear-sweep.csv out.png --h200

For sweeps recorded before `--roofline` existed: the medians are the CSV's (measured), the traffic and
flops come from the family's spec.py hooks, and --h200 puts the H200 SXM's attribute values in place of a
device query (132 SMs, 1,980 MHz, 3,201 MHz memory clock, 6,016-bit bus, as torch reported them there), which this machine cannot make.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from playground.report import plot  # noqa: E402

from playground.family import registry, spec as specs
from playground.run.peaks import from_attributes  # noqa: E402

H200 = dict(capability=(9, 0), sm_count=132, sm_clock_khz=1_980_000, mem_clock_khz=3_201_000, bus_bits=6016)


def records(rows: list[dict], peaks) -> tuple[list[dict], str]:
    """The CSV's rows as run records (one per size), with traffic, flops and the peaks filled in."""
    family = rows[0]["family"]
    fam, hooks = registry.find(family), specs.load(registry.find(family))
    out: dict[tuple, dict] = {}
    for row in rows:
        sizes = {k: int(row[k]) for k in fam.sizes}
        dtype = row["dtype"]
        r = out.setdefault(tuple(sizes.values()), {
            "family": family, "device": row["device"], "dtype": dtype, "sizes": sizes, "params": {}, "torch": "",
            "traffic": hooks.traffic(sizes, getattr(torch, dtype)), "flops": hooks.flops(sizes),
            "peak_gbps": peaks and peaks.bandwidth_gbps, "peak_gflops": peaks and peaks.flops(dtype),
            "copy_gbps": _copy(row),
            "variants": [], "baselines": {}})
        t = {"gflops": r["flops"] / float(row["median_s"]) / 1e9}
        if row.get("baseline") == "yes" or row["variant"] not in fam.variants:  # older CSVs: no baseline column
            r["baselines"][row["variant"]] = t
        else:
            r["variants"].append({"variant": row["variant"], **t})
    return list(out.values()), next(iter(fam.sizes))


def _copy(row: dict) -> float | None:
    """The measured copy: copy_gbps, or peak_gbps in a CSV written before the device's peak (it was the copy)."""
    value = row["copy_gbps"] if "copy_gbps" in row else row.get("peak_gbps")
    return float(value) if value else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--h200", action="store_true", help="the H200 SXM's ceilings (else points only)")
    args = parser.parse_args()
    rows = list(csv.DictReader(open(args.csv)))
    peaks = from_attributes("NVIDIA H200", **H200) if args.h200 else None
    recs, key = records(rows, peaks)
    for r in recs:
        r["torch"] = f"2.11.0+cu130 (the medians of {Path(args.csv).name})"
    plot.roofline(recs, key, args.png)


if __name__ == "__main__":
    main()
