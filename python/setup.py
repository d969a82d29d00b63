"""Packs the fmha package with the libfmha.so that `make` built at the repository root
($FMHA_LIBRARY names another). The metadata is in pyproject.toml."""
import os
import shutil
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

REPO = Path(__file__).resolve().parent.parent


def built_library():
    path = Path(os.environ.get("FMHA_LIBRARY") or REPO / "bin" / "libfmha.so")
    if not path.is_file():
        raise SystemExit(f"fmha: {path} does not exist: run `make` at {REPO} first (it builds libfmha.so), "
                         "or set FMHA_LIBRARY to a built libfmha.so")
    return path


class BuildWithLibrary(build_py):
    """The Python files, and libfmha.so beside them in fmha/lib/."""

    def run(self):
        super().run()
        target = Path(self.build_lib) / "fmha" / "lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built_library(), target / "libfmha.so")


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(packages=["fmha"], cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
