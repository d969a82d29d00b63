#!/usr/bin/env python3
"""Generates the fmha kernel catalogue (see `python3 setup.py --help`)."""
import sys

from generator.cli import main

if __name__ == "__main__":
    sys.exit(main())
