"""Repeated eager calls: a call that agrees with an earlier one on everything the checks and the
backend choice read (the tensors' shapes, strides, dtypes and devices; the other arguments,
with their types) passes and fails alike, so the catalogue's launch for it is kept and reused.
What can differ between such calls is checked every time: whether autograd or torch.compile is
involved (then the operator path runs) and the data pointers' alignment (then the full path
runs, and falls back).

The checks and the choice cost more than the launch itself in a decode loop (docs/python.md).
"""
import torch

from . import _catalogue

_MAX_CALLS = 4096
_launches = {}  # call key -> the catalogue's launch (fmha._catalogue.prepare)


def _key(function, tensors, arguments):
    """The key of a call, or None for a non-tensor: the function's name, each tensor's shape,
    strides, dtype and device (None for an optional tensor not given), then the arguments' types
    (1, 1.0 and True are equal keys that the checks tell apart), the arguments, and, for the last
    one, the window pair, its items' types. Flat: a flat tuple hashes faster than one of pairs."""
    try:
        key = [function]
        key += [None if t is None else (t.shape, t.stride(), t.dtype, t.get_device()) for t in tensors]
    except AttributeError:
        return None
    key += map(type, arguments)
    key += arguments
    window = arguments[-1]
    if isinstance(window, (tuple, list)):
        key[-1] = tuple(window)  # hashable where it is a list (its type is in the key already)
        key += map(type, window)
    return tuple(key)


def kept(function, tensors, arguments):
    """(key, the launch kept for a call like an earlier one), or (key, None) where the caller runs
    the full path (then keep(key, ...) or remember(key, ...)). function: the public function's
    name; tensors: q, k, v, then the others the call has (lengths, options; None where not given);
    arguments: its non-tensor arguments, the window pair last; key: None under torch.compile,
    which traces the full path, or where the call has none. Calls under autograd get no launch."""
    if torch.compiler.is_compiling():
        return None, None
    key = _key(function, tensors, arguments)
    try:
        launch = _launches.get(key)
    except TypeError:  # an unhashable argument
        return None, None
    q, k, v = tensors[0], tensors[1], tensors[2]
    if launch is not None and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return key, None
    return key, launch


def run(function, tensors, arguments, seqlens_kv, return_lse, alibi_slopes=None, block_table=None):
    """(key, (out, LSE or None)) by the launch kept for a call like an earlier one (kept()), or
    (key, None) where the caller runs the full path."""
    key, launch = kept(function, tensors, arguments)
    if launch is None:
        return key, None
    q, k, v = tensors[0], tensors[1], tensors[2]
    # seqlens_kv as it is: only contiguous lengths are kept (keep()), and the key holds their strides.
    # None where a data pointer is not 16-byte aligned: the full path then falls back.
    return key, _catalogue.forward(launch, q, k, v, None, seqlens_kv, return_lse, True,  # kept=True
                                   alibi_slopes, block_table)


def keep(key, q, k, v, seqlens_q, scale, left, right, dropout_p, seqlens_kv=None, softcap=0.0, alibi_slopes=None,
         paged=None):
    """After the full path's checks passed: keeps the catalogue's launch for the call under key,
    where the catalogue serves it. seqlens_kv: the call's lengths tensor, which run() passes to
    the kernels as it is: a call whose lengths are not contiguous (which the full path copies) is
    not kept. Contiguity is a matter of shape and strides, which the key holds. softcap,
    alibi_slopes, paged: as fmha._catalogue.prepare takes them (the tensors as run() passes them)."""
    if key is None or key in _launches or (seqlens_kv is not None and not seqlens_kv.is_contiguous()) or dropout_p > 0:
        return  # (a dropout call draws its seed and offset: fmha._ops)
    launch, _ = _catalogue.prepare(q, k, v, seqlens_q, scale, left, right, dropout_p, softcap=softcap,
                                   alibi_slopes=alibi_slopes, paged=paged)
    remember(key, launch)


def remember(key, launch):
    """Keeps a launch the full path prepared for a call whose checks passed (None: nothing)."""
    if key is not None and launch is not None:
        if len(_launches) >= _MAX_CALLS:  # e.g. a growing KV cache: a new shape every step
            _launches.clear()
        _launches[key] = launch
