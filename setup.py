#!/usr/bin/env python3
"""Generates the fmha kernel catalogue (see `python3 setup.py --help`)."""
import sys

try:
    from generator.cli import main
except ModuleNotFoundError as error:  # jinja2, most likely: say which Python lacks it and what installs it
    print(f"setup.py: {sys.executable} lacks the module {error.name}: run `make deps`, which installs it and "
          "names the Python that has it (or run setup.py with that Python)", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(main())
