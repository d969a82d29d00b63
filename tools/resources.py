#!/usr/bin/env python3
"""Summarises the AMD compiler's resource report (-Rpass-analysis=kernel-resource-usage) of
every catalogue kernel and fails when any kernel uses scratch or spills registers.

Usage: resources.py REPORT_DIR   (one <kernel name>.txt per kernel, written by the build)
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


def main(argv):
    reports = sorted(Path(argv[1]).glob("*.txt"))
    if not reports:
        print("resources: no reports found", file=sys.stderr)
        return 1
    header = f"{'kernel':52s} {'VGPR':>5s} {'AGPR':>5s} {'SGPR':>5s} {'scratch':>7s} {'spills':>7s} {'LDS':>6s} {'occ':>4s}"
    print(header)
    failures = []
    for report in reports:
        functions = parse(report.read_text())
        kernels = {f: r for f, r in functions.items() if "fwd_kernel" in f}
        if not kernels:
            failures.append(f"{report.stem}: no kernel in the compiler's report")
            continue
        for row in kernels.values():
            spills = row.get("vgpr_spill", 0) + row.get("sgpr_spill", 0)
            print(f"{report.stem:52s} {row.get('vgpr', 0):5d} {row.get('agpr', 0):5d} {row.get('sgpr', 0):5d} "
                  f"{row.get('scratch', 0):7d} {spills:7d} {row.get('lds', 0):6d} {row.get('occupancy', 0):4d}")
            if row.get("scratch", 0) or spills:
                failures.append(f"{report.stem}: scratch {row.get('scratch', 0)} bytes/lane, {spills} spills")
    print(f"resources: {len(reports)} kernels checked, {len(failures)} with scratch or spills")
    for failure in failures:
        print(f"  FAIL {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
