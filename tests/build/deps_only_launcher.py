#!/usr/bin/env python3
"""A compiler launcher for tests of the build graph (`LAUNCHER=` of the Makefile): instead of
compiling, it writes an empty object and a depfile naming every project header the source
includes, found by following each #include line through the -I folders. It ignores #if, so it
lists at least the headers the compiler would read: a dependency it misses cannot hide a rebuild.

Usage: deps_only_launcher.py COMPILER ARGS...  (the command line CMake gives its compilers)
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def value_of(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def included_headers(source, include_dirs):
    headers, todo = set(), [source]
    while todo:
        path = todo.pop()
        for name in INCLUDE.findall(path.read_text(errors="replace")):
            for folder in (path.parent, *include_dirs):
                candidate = (folder / name).resolve()
                if candidate.is_file():
                    if candidate not in headers:
                        headers.add(candidate)
                        todo.append(candidate)
                    break  # not found in any folder: a system header, which no build changes
    return headers


def main(argv):
    args = argv[2:]  # argv[1]: the compiler, not run
    include_dirs = [Path(a[2:]) for a in args if a.startswith("-I") and len(a) > 2]
    include_dirs += [Path(args[i + 1]) for i, a in enumerate(args) if a == "-I"]
    source = Path(value_of(args, "-c")).resolve()
    Path(value_of(args, "-o")).write_bytes(b"")
    depfile = value_of(args, "-MF")
    if depfile:
        prerequisites = [str(source)] + sorted(map(str, included_headers(source, include_dirs)))
        Path(depfile).write_text(f"{value_of(args, '-MT')}: " + " \\\n  ".join(prerequisites) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
