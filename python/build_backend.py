"""The fmha package's build backend (PEP 517, named by pyproject.toml): writes the wheel itself
with zipfile, so `pip install --no-build-isolation --no-deps ./python` needs neither setuptools
nor the `wheel` package, nor a network. The wheel holds fmha/*.py and, in fmha/lib/, the
libfmha.so that `make` built in the repository's bin/ ($FMHA_LIBRARY names another): the
installed package then needs nothing from the clone."""
import base64
import hashlib
import os
import sysconfig
import zipfile
from pathlib import Path

NAME, VERSION = "fmha", "0.1.0"
SUMMARY = "The fmha kernel catalogue behind FlashAttention's Python API (flash_attn_func and friends)"
HERE = Path(__file__).resolve().parent


def built_library():
    path = Path(os.environ.get("FMHA_LIBRARY") or HERE.parent / "bin" / "libfmha.so")
    if not path.is_file():
        raise SystemExit(f"fmha: {path} does not exist: run `make` at {HERE.parent} first (it builds libfmha.so), "
                         "or set FMHA_LIBRARY to a built libfmha.so")
    return path


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # Tagged for this platform, any Python 3: the package is Python plus a compiled library it loads with ctypes.
    tag = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    info = f"{NAME}-{VERSION}.dist-info"
    files = {f"fmha/{path.name}": path.read_bytes() for path in sorted((HERE / "fmha").glob("*.py"))}
    files["fmha/lib/libfmha.so"] = built_library().read_bytes()
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
                                 "Requires-Python: >=3.9\n").encode()
    files[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: fmha build_backend\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            info_entry = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info_entry.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            wheel.writestr(info_entry, data, zipfile.ZIP_DEFLATED)
    return wheel_name
