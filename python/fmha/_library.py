"""libfmha.so through ctypes: the C ABI of src/capi/fmha_capi.h. Needs no PyTorch.

The library is looked for, in order: $FMHA_LIBRARY; next to this file (lib/libfmha.so, where
`pip install ./python` puts it); for the clone's own python/fmha only, the repository's bin/ and
build/<platform>/ (in-tree use after `make`). It is loaded once, on first use.
"""
import ctypes
import os
import struct
from pathlib import Path

ABI_VERSION = 7  # FMHA_ABI_VERSION of the header these structures mirror

# fmha_status
OK, INVALID_ARGUMENT, NO_KERNEL, NO_DEVICE, RUNTIME_ERROR = range(5)
# fmha_dtype
FP16, BF16 = 0, 1

_c_int32, _c_int64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class Problem(ctypes.Structure):
    """fmha_problem: the sizes and options that choose a kernel."""
    _fields_ = [("dtype", _c_int32), ("batch", _c_int32), ("heads_q", _c_int32), ("heads_kv", _c_int32),
                ("seqlen_q", _c_int32), ("seqlen_kv", _c_int32), ("head_dim", _c_int32), ("masked", _c_int32),
                ("window_left", _c_int32), ("window_right", _c_int32), ("scale", ctypes.c_float), ("packed", _c_int32),
                ("softcap", ctypes.c_float), ("alibi", _c_int32), ("page_size", _c_int32), ("max_pages_per_seq", _c_int32),
                ("dropout_p", ctypes.c_float), ("total_q", _c_int32), ("deterministic", _c_int32)]


class Tensors(ctypes.Structure):
    """fmha_tensors, with each fmha_strides spelled out as its three int64 fields (the same
    layout) so that one constructor call fills it."""
    _fields_ = [("q", _ptr), ("k", _ptr), ("v", _ptr), ("o", _ptr)] + [
        (f"{name}_{dim}_stride", _c_int64) for name in "qkvo" for dim in ("batch", "head", "row")] + [
        ("seqlens_q", _ptr), ("seqlens_kv", _ptr), ("lse", _ptr), ("cu_seqlens_q", _ptr), ("cu_seqlens_kv", _ptr),
        ("total_q", _c_int32), ("total_kv", _c_int32), ("alibi_slopes", _ptr), ("block_table", _ptr),
        ("dropout_seed_offset", _ptr)]


# fmha_tensors as bytes, for the hot path: one pack() of the pointers (0 for NULL) and strides
# costs less than filling a Tensors. The same layout: 21 fields of 8 bytes, two of 4, then three
# pointers (the last, v4: dropout's seed and offset), no padding.
TENSORS = struct.Struct("@4P12q5P2i3P")


# fmha_bwd_tensors as bytes: q, k, v, o, d_o, dq, dk, dv; their 24 strides; seqlens_q, seqlens_kv,
# lse, d_lse, dropout_seed_offset, cu_seqlens_q, cu_seqlens_kv (0 for NULL); total_q, total_kv;
# alibi_slopes (v7).
BWD_TENSORS = struct.Struct("@8P24q7P2iP")


class KvAppend(ctypes.Structure):
    """fmha_kv_append: flash_attn_with_kvcache's append of new keys and values, with rotary."""
    _fields_ = [(name, _c_int32) for name in (
        "dtype", "device", "batch", "seqlen_new", "heads_kv", "head_dim", "capacity", "cache_rows", "page_size",
        "max_pages_per_seq", "seqlen_fixed", "rotary_dim", "rotary_interleaved", "seqlen_ro", "seqlen_q", "heads_q",
        "q_per_row")] + [("k_new", _ptr), ("v_new", _ptr), ("k_cache", _ptr), ("v_cache", _ptr)] + [
        (f"{name}_{dim}_stride", _c_int64) for name in ("k_new", "v_new", "k_cache", "v_cache")
        for dim in ("batch", "head", "row")] + [
        (name, _ptr) for name in ("cache_seqlens", "cache_batch_idx", "block_table", "rotary_cos", "rotary_sin", "q",
                                  "q_out")] + [
        (f"{name}_{dim}_stride", _c_int64) for name in ("q", "q_out") for dim in ("batch", "head", "row")] + [
        ("seqlens_out", _ptr), ("error", _ptr)]


# Bits of fmha_kv_append.error: a sequence's tokens passed the capacity; an index named no row or page.
APPEND_OVERFLOW, APPEND_BAD_INDEX = 1, 2


class Plan(ctypes.Structure):
    """fmha_plan: the chosen kernel, its device and the workspace bytes its launch needs."""
    _fields_ = [("kernel", _c_int32), ("device", _c_int32), ("workspace_bytes", ctypes.c_uint64)]


class LibraryError(RuntimeError):
    """A failed C ABI call: `status` is the fmha_status, the message fmha_last_error()."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def candidate_paths():
    here = Path(__file__).resolve().parent
    repo = here.parent.parent
    paths = [Path(os.environ["FMHA_LIBRARY"])] if os.environ.get("FMHA_LIBRARY") else []
    paths.append(here / "lib" / "libfmha.so")
    if here.parent.name == "python" and (repo / "Makefile").is_file():  # in the clone, not installed
        paths += [repo / "bin" / "libfmha.so", repo / "build" / "nvidia" / "libfmha.so", repo / "build" / "amd" / "libfmha.so"]
    return paths


class Library:
    """The loaded libfmha.so, with its functions typed."""

    def __init__(self, path):
        self.path = path
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as error:
            if "GLIBC_" not in str(error):
                raise
            # The AMD build of a Debian 12 machine runs on the Debian 13 root's HIP runtime and C library.
            raise OSError(f"{path} needs a newer C library than this Python's ({error}): an AMD build made with "
                          "the Debian 13 toolchain root runs on that root's C library, which fmha.exe and the test "
                          "binaries load through the root's loader but a Python of this system cannot") from None
        self._lib = lib
        signatures = {
            "fmha_abi_version": (_c_int32, []),
            "fmha_last_error": (ctypes.c_char_p, []),
            "fmha_build_platform": (ctypes.c_char_p, []),
            "fmha_kernel_count": (_c_int32, []),
            "fmha_kernel_name": (ctypes.c_char_p, [_c_int32]),
            "fmha_device_arch": (ctypes.c_int, [_c_int32, ctypes.POINTER(ctypes.c_char_p)]),
            "fmha_plan_forward": (ctypes.c_int, [ctypes.POINTER(Problem), _c_int32, ctypes.POINTER(Plan),
                                                 ctypes.c_char_p, ctypes.c_size_t]),
            "fmha_forward": (ctypes.c_int, [ctypes.POINTER(Plan), ctypes.POINTER(Problem), ctypes.POINTER(Tensors),
                                            _ptr, ctypes.c_uint64, _ptr]),
        }
        for name, (restype, argtypes) in signatures.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        version = lib.fmha_abi_version()
        if version != ABI_VERSION:
            raise OSError(f"{path} has C ABI version {version}, this package needs {ABI_VERSION}: rebuild with make "
                          "and reinstall the package")
        self.platform = lib.fmha_build_platform().decode()
        # The backward entry points (added beside the forward's, so the ABI version stayed): a
        # library without them serves no backward, and fmha's backward recomputes in PyTorch.
        self.has_backward = hasattr(lib, "fmha_plan_backward")
        if self.has_backward:
            lib.fmha_plan_backward.restype = ctypes.c_int
            lib.fmha_plan_backward.argtypes = [ctypes.POINTER(Problem), _c_int32, ctypes.POINTER(Plan), ctypes.c_char_p,
                                               ctypes.c_size_t]
            lib.fmha_bwd_kernel_name.restype, lib.fmha_bwd_kernel_name.argtypes = ctypes.c_char_p, [_c_int32]
            self.launch_backward = lib["fmha_backward"]
            self.launch_backward.restype = ctypes.c_int
            self.launch_backward.argtypes = [_ptr, _ptr, ctypes.c_char_p, _ptr, ctypes.c_uint64, _ptr]
        # The append (added beside the forward, so the ABI version stayed): without it, fmha's
        # flash_attn_with_kvcache appends with PyTorch ops.
        self.has_append = hasattr(lib, "fmha_append_kv")
        if self.has_append:
            self.append_kv = lib["fmha_append_kv"]
            self.append_kv.restype = ctypes.c_int
            self.append_kv.argtypes = [_ptr, _ptr]  # address of a KvAppend, stream
        # The launch itself, called directly on the hot path, typed for the cheapest conversions:
        # launch(address of a Plan, address of a Problem, TENSORS bytes, workspace, workspace_bytes,
        # stream) -> status. (lib["..."] is a second function object: lib.fmha_forward keeps its types.)
        self.launch = lib["fmha_forward"]
        self.launch.restype = ctypes.c_int
        self.launch.argtypes = [_ptr, _ptr, ctypes.c_char_p, _ptr, ctypes.c_uint64, _ptr]
        lib.fmha_dropout_mask.restype = ctypes.c_int
        lib.fmha_dropout_mask.argtypes = [ctypes.c_float, _ptr, _c_int32, _c_int32, _c_int32, _c_int32, _ptr, _ptr]

    def last_error(self):
        return self._lib.fmha_last_error().decode()

    def check(self, status):
        if status != OK:
            raise LibraryError(status, self.last_error())

    def kernel_names(self):
        return [self._lib.fmha_kernel_name(i).decode() for i in range(self._lib.fmha_kernel_count())]

    def device_arch(self, device):
        arch = ctypes.c_char_p()
        self.check(self._lib.fmha_device_arch(device, ctypes.byref(arch)))
        return arch.value.decode()

    def plan(self, problem, device):
        """(Plan, reason) for the problem on the device; LibraryError (NO_KERNEL, NO_DEVICE, ...) if none."""
        plan = Plan()
        reason = ctypes.create_string_buffer(1024)
        self.check(self._lib.fmha_plan_forward(problem, device, plan, reason, len(reason)))
        return plan, reason.value.decode()

    def plan_backward(self, problem, device):
        """(Plan, kernel name, reason) of the backward kernel for the problem; LibraryError if none."""
        if not self.has_backward:
            raise LibraryError(NO_KERNEL, f"{self.path} has no backward entry points: rebuild it")
        plan = Plan()
        reason = ctypes.create_string_buffer(1024)
        self.check(self._lib.fmha_plan_backward(problem, device, plan, reason, len(reason)))
        return plan, self._lib.fmha_bwd_kernel_name(plan.kernel).decode(), reason.value.decode()

    def dropout_mask(self, dropout_p, seed_offset, batch, heads, seqlen_q, seqlen_kv, mask, stream):
        """Writes the kernels' dropout mask (fmha_dropout_mask; device pointers) on stream."""
        self.check(self._lib.fmha_dropout_mask(dropout_p, seed_offset, batch, heads, seqlen_q, seqlen_kv, mask, stream))

    def kernel_name(self, kernel):
        name = self._lib.fmha_kernel_name(kernel)
        return name.decode() if name is not None else None


_loaded = None      # the Library, once loaded
_load_error = None  # why it could not be, once tried


def load():
    """The Library; OSError saying where it was looked for when it cannot be loaded."""
    global _loaded, _load_error
    if _loaded is not None:
        return _loaded
    if _load_error is None:
        tried = []
        for path in candidate_paths():
            if not path.is_file():
                tried.append(f"{path} (absent)")
                continue
            try:
                _loaded = Library(path)
                return _loaded
            except OSError as error:
                tried.append(f"{path} ({error})")
        _load_error = ("libfmha.so was not found or not loadable: " + "; ".join(tried) +
                       ". Build it with `make` at the repository root (then `pip install ./python` to install it), "
                       "or point FMHA_LIBRARY at it")
    raise OSError(_load_error)
