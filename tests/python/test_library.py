"""The Python package's ctypes binding of libfmha.so, and the package without PyTorch: these
need neither PyTorch nor a GPU, so they run everywhere `make` has built the library."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_BIN = Path(os.environ.get("FMHA_BIN_DIR", _REPO / "bin"))
_LIBRARY = _BIN / "libfmha.so"
sys.path.append(str(_REPO / "python"))  # the in-tree package, unless one is installed
from fmha import _library  # noqa: E402  (needs no PyTorch)


def _load():
    assert _LIBRARY.is_file(), f"{_LIBRARY} was not built: run make"
    try:
        return _library.Library(_LIBRARY)
    except OSError as error:
        # The AMD build of a Debian 12 machine links the Debian 13 root's HIP runtime, which
        # needs that root's C library: its binaries run through the root's loader, but this
        # Python cannot load it (docs/setup.md).
        if "needs a newer C library than this Python's" in str(error) and "/trixie/" in str(error):
            pytest.skip(f"this Python cannot load a library built against the Debian 13 root's runtime: {error}")
        raise


def test_python_binding_mirrors_the_c_structs():
    # The sizes src/capi/fmha_capi.cpp asserts for the C structs.
    assert ctypes.sizeof(_library.Problem) == 76
    assert ctypes.sizeof(_library.Plan) == 16
    assert ctypes.sizeof(_library.Tensors) == 200
    assert _library.BWD_TENSORS.size == 328  # fmha_bwd_tensors (fmha_capi.cpp asserts the same)
    assert _library.Tensors.seqlens_q.offset == 128 and _library.Tensors.cu_seqlens_q.offset == 152
    assert _library.Tensors.alibi_slopes.offset == 176 and _library.Tensors.dropout_seed_offset.offset == 192
    # The hot path packs fmha_tensors with struct: the same bytes as the ctypes struct.
    pointers, strides = [16 * i for i in range(1, 5)], list(range(-8, 88, 8))
    packed = _library.TENSORS.pack(*pointers, *strides, 80, 0, 96, 112, 128, 7, 9, 144, 160, 176)
    assert packed == bytes(_library.Tensors(*pointers, *strides, 80, None, 96, 112, 128, 7, 9, 144, 160, 176))


def test_python_binding_lists_the_catalogue_of_fmha_exe():
    library = _load()
    listing = subprocess.run([str(_BIN / "fmha.exe"), "-list"], capture_output=True, text=True).stdout
    listed = [line.split()[0] for line in listing.splitlines() if line.startswith("fmha_fwd_")]  # less "(runs here)"
    assert listed and sorted(library.kernel_names()) == sorted(listed)
    assert library.platform in ("nvidia", "amd")


def test_python_binding_reports_errors():
    library = _load()
    bad = _library.Problem(_library.FP16, 2, 8, 3, 1, 64, 128, 0, -1, -1, 0.0)
    with pytest.raises(_library.LibraryError, match=r"heads \(8\) must be a multiple of KV heads \(3\)") as error:
        library.plan(bad, 0)
    assert error.value.status == _library.INVALID_ARGUMENT
    paged = _library.Problem(_library.FP16, 2, 8, 2, 1, 64, 128, 0, -1, -1, 0.0, 0, 0.0, 0, 24, 4)  # ABI v3's fields
    with pytest.raises(_library.LibraryError, match=r"power of two from 16 to 256 \(got 24\)"):
        library.plan(paged, 0)
    good = _library.Problem(_library.FP16, 2, 8, 2, 1, 64, 128, 0, -1, -1, 0.0)
    # The hot path's typed launch (addresses, packed tensors) reaches the C checks.
    stale = _library.Plan(-1, 0, 0)
    status = library.launch(ctypes.addressof(stale), ctypes.addressof(good), _library.TENSORS.pack(*[0] * 26), None, 0,
                            None)
    assert status == _library.INVALID_ARGUMENT and "plan.kernel -1 is not in" in library.last_error()
    try:
        plan, reason = library.plan(good, 0)
    except _library.LibraryError as no_device:
        assert no_device.status == _library.NO_DEVICE and "no GPU" in str(no_device)
    else:
        assert library.kernel_name(plan.kernel).startswith("fmha_fwd_fp16_d128_") and "family" in reason


def test_python_binding_of_the_append_reaches_its_checks():
    """fmha_kv_append as ctypes lays it out (fmha_capi.cpp asserts the same offsets), and a bad
    append named by the C checks before any device is asked."""
    assert ctypes.sizeof(_library.KvAppend) == 320
    assert (_library.KvAppend.k_new.offset, _library.KvAppend.cache_seqlens.offset,
            _library.KvAppend.seqlens_out.offset) == (72, 200, 304)
    library = _load()
    assert library.has_append
    args = _library.KvAppend(dtype=_library.BF16, device=-1, batch=2, seqlen_new=1, heads_kv=2, head_dim=60, capacity=64,
                             cache_rows=2)
    assert library.append_kv(ctypes.addressof(args), None) == _library.INVALID_ARGUMENT
    message = library.last_error()
    assert "head_dim must be a multiple of 8 (got 60)" in message and "error is NULL" in message, message


def test_python_binding_names_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr(_library, "_loaded", None)
    monkeypatch.setattr(_library, "_load_error", None)
    monkeypatch.setattr(_library, "candidate_paths", lambda: [tmp_path / "libfmha.so"])
    with pytest.raises(OSError, match=r"libfmha.so \(absent\).*run|libfmha.so \(absent\).*make"):
        _library.load()


def test_python_package_without_torch_says_it_needs_torch():
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"
    if subprocess.run([sys.executable, "-c", probe]).returncode == 0:
        pytest.skip(f"PyTorch is installed in {sys.executable}: the package's API is tested instead")
    result = subprocess.run([sys.executable, "-c", "import fmha; fmha.flash_attn_func"], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(_REPO / "python")})
    assert result.returncode == 1
    assert "ImportError: fmha.flash_attn_func needs PyTorch" in result.stderr, result.stderr


def test_python_package_compiles():
    """Every module of the package and its tests parses, also where PyTorch is missing to import them."""
    sources = sorted((_REPO / "python").rglob("*.py")) + sorted((_REPO / "tests" / "python").glob("*.py"))
    assert len(sources) >= 10
    for source in sources:
        if "build" not in source.relative_to(_REPO).parts:
            compile(source.read_text(), str(source), "exec")  # SyntaxError names the file and line
