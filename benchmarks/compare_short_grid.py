#!/usr/bin/env python3
"""Two builds' short-key grids (decode_steps.py --part short tables, as tools/ab_short_grid.sh
writes them): each point the best of a build's runs; the points at 0.9 and 0.85 of copy or better,
by head dim; the points that moved most; for one head dim, the mean change by rows per KV head
and key count; and, for a rule read from those maps, the grid that keeps the second build's
points where the rule holds and the first's elsewhere.

    python3 benchmarks/compare_short_grid.py logs/short_main_*.md --against logs/short_change_*.md \
        [--head-dim 128] [--compose "d == 256 and rows > 8 and keys >= 3 and rows + keys <= 18"]
"""
import argparse
import statistics


def load(path):
    """{(dtype, head_dim, heads, seqlen_q, rows, keys): fraction of copy} of one table."""
    grid = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 21 and cells[0] in ("fp16", "bf16"):
            for keys, value in enumerate(cells[5:], 1):
                grid[(cells[0], int(cells[1]), cells[2], int(cells[3]), int(cells[4]), keys)] = float(value)
    return grid


def best(paths):
    grids = [load(p) for p in paths]
    return {point: max(g[point] for g in grids) for point in grids[0]}


def summary(name, grid):
    values = list(grid.values())
    by_dim = ", ".join(f"d{d} {sum(v >= 0.9 for k, v in grid.items() if k[1] == d)}"
                       for d in sorted({k[1] for k in grid}))
    print(f"{name}: {sum(v >= 0.9 for v in values)} of {len(values)} at 0.9 of copy or better ({by_dim}); "
          f"{sum(v >= 0.85 for v in values)} at 0.85; median {statistics.median(values):.2f}; lowest {min(values):.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", nargs="+", help="the first build's tables")
    parser.add_argument("--against", nargs="+", required=True, help="the second build's tables")
    parser.add_argument("--head-dim", type=int, help="the mean change by rows and keys at this head dim")
    parser.add_argument("--compose", metavar="RULE",
                        help="a Python expression of dtype, d, heads_kv, seqlen_q, rows and keys: where it holds, "
                             "the second build's point, elsewhere the first's")
    options = parser.parse_args()
    first, second = best(options.tables), best(options.against)
    summary("first", first)
    summary("second", second)
    if options.compose:
        rule = compile(options.compose, "--compose", "eval")
        def takes(point):
            dtype, d, heads, seqlen_q, rows, keys = point
            names = dict(dtype=dtype, d=d, heads_kv=int(heads.split("/")[1]), seqlen_q=seqlen_q, rows=rows, keys=keys)
            return eval(rule, {}, names)
        summary(f"composed ({options.compose})", {k: second[k] if takes(k) else first[k] for k in first})
    moves = sorted((second[k] - first[k], k) for k in first)
    for label, chosen in (("fell most", moves[:8]), ("rose most", moves[-8:][::-1])):
        print(f"{label}: " + "; ".join(f"{d:+.2f} {k[0]} d{k[1]} {k[2]} s_q {k[3]} keys {k[5]}" for d, k in chosen))
    if options.head_dim:
        print(f"d{options.head_dim}, mean change, rows per KV head (lines) by keys (columns):")
        print("rows " + " ".join(f"{k:5d}" for k in range(1, 17)))
        for rows in sorted({k[4] for k in first if k[1] == options.head_dim}):
            cells = []
            for keys in range(1, 17):
                points = [k for k in first if k[1] == options.head_dim and k[4] == rows and k[5] == keys]
                cells.append(f"{sum(second[k] - first[k] for k in points) / len(points):+.2f}")
            print(f"{rows:4d} " + " ".join(cells))


if __name__ == "__main__":
    main()
