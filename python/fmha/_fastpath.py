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


def _key(tensors, arguments):
    """The key of a call, or None for a non-tensor. Each argument goes in with its type (and a
    pair's items with theirs): 1, 1.0 and True are equal keys that the checks tell apart."""
    key = []
    try:
        for t in tensors:
            key += (t.shape, t.stride(), t.dtype, t.get_device())
    except AttributeError:
        return None
    for a in arguments:
        if isinstance(a, (tuple, list)):
            key += (type(a), tuple(map(type, a)), tuple(a))
        else:
            key += (type(a), a)
    return tuple(key)


def lookup(tensors, arguments):
    """(key, launch): the call's key (None under torch.compile, which traces the full path, or
    where it has none) and the kept launch where the catalogue can take this call's tensors as
    they are (else None: the caller runs the full path, then keep())."""
    if torch.compiler.is_compiling():
        return None, None
    key = _key(tensors, arguments)
    try:
        launch = _launches.get(key)
    except TypeError:  # an unhashable argument
        return None, None
    if launch is None:
        return key, None
    q, k, v = tensors[:3]
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return key, None
    if q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16:
        return key, None
    return key, launch


def keep(key, q, k, v, seqlens_q, scale, left, right, dropout_p):
    """After the full path's checks passed: keeps the catalogue's launch for the call under key,
    where the catalogue serves it."""
    if key is None or key in _launches:
        return
    launch, _ = _catalogue.prepare(q, k, v, seqlens_q, scale, left, right, dropout_p)
    if launch is not None:
        if len(_launches) >= _MAX_CALLS:  # e.g. a growing KV cache: a new shape every step
            _launches.clear()
        _launches[key] = launch
