"""python3 setup.py: the generator's command line."""
import argparse
import collections
import json
import sys
from pathlib import Path

from .catalogue import DEFAULT_AXES, select
from .render import write_all

REPO = Path(__file__).resolve().parent.parent
AXIS_OPTIONS = {  # option -> (axis, value parser)
    "dtypes": ("dtype", str),
    "head_dims": ("head_dim", int),
    "heads": ("heads", str),
    "masks": ("mask", str),
    "families": ("family", str),
    "archs": ("arch", str),
}


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="setup.py",
        description="Generate the fmha kernel catalogue: one HIP source per config tuple plus "
                    "the kernel tables, under generated/. Axis options ADD values to the "
                    "default axes (e.g. --head-dims 96); the selection is recorded in "
                    "generated/selection.json and reused by --refresh (what `make` runs), to which axis options then add.")
    p.add_argument("--list", action="store_true", help="print the selected kernel names; write nothing")
    p.add_argument("--filter", metavar="GLOB",
                   help="keep only kernels whose name matches this fnmatch glob (default: *)")
    p.add_argument("--only", action="store_true",
                   help="axis options replace the default values instead of adding to them")
    p.add_argument("--refresh", action="store_true",
                   help="re-render the selection recorded in generated/selection.json (the "
                        "default catalogue when there is none); axis options add to it")
    p.add_argument("--out", default=str(REPO / "generated"), help="output folder (default: generated/)")
    p.add_argument("--deterministic-backward", action=argparse.BooleanOptionalAction, default=None,
                   help="the backward kernels' deterministic main loop beside their default one (FlashAttention's "
                        "deterministic=True, fmha.exe -bwd -deterministic; built unless --no-deterministic-backward, "
                        "which takes about 40%% off their compile time)")
    for option, (axis, kind) in AXIS_OPTIONS.items():
        p.add_argument("--" + option.replace("_", "-"), nargs="+", type=kind, default=[],
                       metavar=axis.upper(), help=f"{axis} values (default: "
                       f"{' '.join(map(str, DEFAULT_AXES[axis]))})")
    return p.parse_args(argv)


def selection_from_args(args):
    """The selection to render; raises ValueError for options that contradict --refresh."""
    add = {axis: getattr(args, option) for option, (axis, _) in AXIS_OPTIONS.items()
           if getattr(args, option)}
    if not args.refresh:
        selection = {"add": add, "only": args.only, "filter": args.filter or "*"}
        if args.deterministic_backward is not None:  # (else render.deterministic_backward's default)
            selection["deterministic_backward"] = args.deterministic_backward
        return selection
    if args.only or args.filter is not None:
        raise ValueError("--refresh keeps the recorded --only and --filter: leave out --refresh to change them")
    recorded = Path(args.out) / "selection.json"
    selection = json.loads(recorded.read_text()) if recorded.exists() else {"add": {}, "only": False, "filter": "*"}
    for axis, values in add.items():  # added to what was recorded, as the fmha.exe advice needs
        selection["add"][axis] = list(dict.fromkeys(selection["add"].get(axis, []) + values))
    if args.deterministic_backward is not None:
        selection["deterministic_backward"] = args.deterministic_backward
    return selection


def axes_of(selection):
    axes = {}
    for axis, defaults in DEFAULT_AXES.items():
        extra = selection["add"].get(axis, [])
        values = list(extra) if selection["only"] and extra else list(defaults) + list(extra)
        axes[axis] = tuple(dict.fromkeys(values))  # de-duplicated, order kept
    return axes


def summary(configs):
    counts = {axis: collections.Counter(getattr(c, axis) for c in configs) for axis in DEFAULT_AXES}
    lines = [f"{len(configs)} kernels"]
    for axis, counter in counts.items():
        lines.append(f"  {axis:9s} " + ", ".join(f"{v}: {n}" for v, n in sorted(counter.items(), key=str)))
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.filter == "":  # most likely an unset shell variable, not a request for every kernel
        print("setup.py: --filter expects a non-empty glob such as '*fp16*' (leave it out for every kernel)",
              file=sys.stderr)
        return 2
    try:
        selection = selection_from_args(args)
        named = selection["add"].get("family", []) if selection["only"] else []
        catalogue = select(axes_of(selection), selection["filter"], named)
    except ValueError as error:
        print(f"setup.py: {error}", file=sys.stderr)
        return 2
    configs, skips = catalogue.configs, "".join(f"\n  {note}" for note in catalogue.skip_notes())
    if not configs:
        print(f"setup.py: no kernel matches the selection {json.dumps(selection)}", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(c.name for c in configs))
        if skips:
            print(f"setup.py: skipped:{skips}", file=sys.stderr)
        return 0
    if args.deterministic_backward and not any(c.direction == "bwd" for c in configs):
        print("setup.py: --deterministic-backward: the selection has no backward kernel", file=sys.stderr)
        return 2
    try:
        written, removed = write_all(args.out, configs, selection)
    except OSError as error:
        print(f"setup.py: --out expects a folder it can create and write, {args.out} is not one "
              f"({error.strerror or error})", file=sys.stderr)
        return 2
    print(f"setup.py: {summary(configs)}{skips}\n  wrote {written} changed file(s), removed {removed} "
          f"stale kernel(s) in {args.out}")
    return 0
