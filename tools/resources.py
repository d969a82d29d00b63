#!/usr/bin/env python3
"""Summarises the AMD compiler's resource report (-Rpass-analysis=kernel-resource-usage) of
every catalogue kernel and fails when any kernel uses scratch or spills vector registers.
SGPR spills are listed but allowed: the compiler puts them in VGPR lanes (v_writelane), never
in memory; if it ever had to use memory, ScratchSize would say so and fail the check. The
README states the same rule.

Usage: resources.py REPORT_DIR [COMPILER]   (one <kernel name>.txt per kernel, written by its
compile; COMPILER: what compiled them, for the header: every kernel's own compile is the report)
"""
import re
import sys
from pathlib import Path

FIELDS = {  # remark label -> column
    "VGPRs": "vgpr", "AGPRs": "agpr", "SGPRs": "sgpr", "ScratchSize [bytes/lane]": "scratch",
    "SGPRs Spill": "sgpr_spill", "VGPRs Spill": "vgpr_spill", "LDS Size [bytes/block]": "lds",
    "Occupancy [waves/SIMD]": "occupancy",
}
REMARK = re.compile(r"remark:\s+(?P<label>[^:]+?):\s+(?P<value>\S+)\s+\[-Rpass-analysis")


def parse(text):
    """Returns {function name: {column: int}} for the kernels (the __global__ functions)."""
    functions, current = {}, None
    for match in REMARK.finditer(text):
        label, value = match["label"].strip(), match["value"]
        if label == "Function Name":
            current = functions.setdefault(value, {})
        elif current is not None and label in FIELDS:
            current[FIELDS[label]] = int(value)
    return functions


def kernel_label(function):
    """A short name for one instantiation: the kernel and, for the decode family, its variant
    (group width, rows per pass, short keys, run-time options), read from the mangled template
    arguments."""
    kernel = re.search(r"[a-z]+_kernel", function)
    label = kernel[0] if kernel else function[:22]
    variant = re.search(r"ELi(\d+)ELi(\d+)ELb([01])E", function)
    if variant and "attend" in label:
        label = f"attend w{variant[1]} r{variant[2]}{' short' if variant[3] == '1' else ''}"
    if "WithOptions" in function or re.search(r"fwd_kernel.*ELb1EEEv", function):
        label += " opts"  # the variant with the run-time options (softcapping, ALiBi, paged KV)
    return label


def main(argv):
    reports = sorted(Path(argv[1]).glob("*.txt"))
    if not reports:
        print("resources: no reports found", file=sys.stderr)
        return 1
    if len(argv) > 2:
        print(f"resources: as reported by the compiles of {argv[2]}")
    header = (f"{'kernel':52s} {'function':22s} {'VGPR':>5s} {'AGPR':>5s} {'SGPR':>5s} {'scratch':>7s} "
              f"{'vspill':>6s} {'sspill':>6s} {'LDS':>6s} {'occ':>4s}")
    print(header)
    failures = []
    for report in reports:
        functions = parse(report.read_text())
        kernels = {f: r for f, r in functions.items() if "_kernel" in f}
        if not kernels:
            failures.append(f"{report.stem}: no kernel in the compiler's report")
            continue
        for function, row in sorted(kernels.items()):
            label = kernel_label(function)
            print(f"{report.stem:52s} {label:22s} {row.get('vgpr', 0):5d} {row.get('agpr', 0):5d} {row.get('sgpr', 0):5d} "
                  f"{row.get('scratch', 0):7d} {row.get('vgpr_spill', 0):6d} {row.get('sgpr_spill', 0):6d} "
                  f"{row.get('lds', 0):6d} {row.get('occupancy', 0):4d}")
            if row.get("scratch", 0) or row.get("vgpr_spill", 0):
                failures.append(f"{report.stem} {label}: scratch {row.get('scratch', 0)} bytes/lane, "
                                f"{row.get('vgpr_spill', 0)} VGPR spills")
    print(f"resources: {len(reports)} kernel files checked, {len(failures)} kernels with scratch or VGPR spills "
          "(SGPR spills stay in VGPR lanes: allowed)")
    for failure in failures:
        print(f"  FAIL {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
