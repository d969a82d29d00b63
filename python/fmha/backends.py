"""Which backend serves a call: the catalogue's kernels when one matches, else PyTorch's
scaled_dot_product_attention with a one-time warning naming the reason, or, in strict mode
(strict=True, or FMHA_STRICT=1 in the environment), an UnsupportedError.

Backends are tried in registry order; each says whether it serves a call and, if not, why.
"""
import os
import warnings

from . import _catalogue, _checks, _dropout, _math


class FallbackWarning(UserWarning):
    """A call ran on PyTorch's attention instead of the catalogue (once per distinct reason)."""


class UnsupportedError(RuntimeError):
    """Strict mode: no catalogue kernel serves the call."""


class Choice:
    """A backend's answer for one call: `backend` ("fmha" or "sdpa"), the kernel (fmha only),
    and why."""
    __slots__ = ("backend", "kernel", "reason", "launch")

    def __init__(self, backend, kernel, reason, launch=None):
        self.backend, self.kernel, self.reason, self.launch = backend, kernel, reason, launch

    def __repr__(self):
        served = f"{self.backend} ({self.kernel})" if self.kernel else self.backend
        return f"{served}: {self.reason}"


class CatalogueBackend:
    name = "fmha"

    def choose(self, q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, softcap, alibi_slopes,
               dropout_seed_offset=None):
        launch, why_not = _catalogue.prepare(q, k, v, seqlens_q, scale, left, right, dropout_p, softcap=softcap,
                                             alibi_slopes=alibi_slopes)
        if launch is None:
            return None, why_not
        return Choice(self.name, launch[0].kernel, launch[0].reason, launch), None

    def forward(self, choice, q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, softcap,
                alibi_slopes, dropout_seed_offset=None):
        if dropout_p > 0 and dropout_seed_offset is None:  # fmha._ops draws them for every call it sends here
            raise RuntimeError("fmha: a dropout call reached the kernels without its seed and offset")
        return _catalogue.forward(choice.launch, q, k, v, seqlens_q, seqlens_kv, return_lse, alibi_slopes=alibi_slopes,
                                  dropout_seed_offset=dropout_seed_offset)


class SdpaBackend:
    """Serves every call (any dtype, device, head_dim, window, dropout); differentiable."""
    name = "sdpa"

    def choose(self, q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, softcap, alibi_slopes,
               dropout_seed_offset=None):
        return Choice(self.name, None, "PyTorch's scaled_dot_product_attention"), None

    def forward(self, choice, q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, softcap,
                alibi_slopes, dropout_seed_offset=None):
        # With a seed and offset the dropout is the kernels' (their backward regenerates it).
        keep = None
        if dropout_p > 0 and dropout_seed_offset is not None:
            keep = _dropout.mask(dropout_p, dropout_seed_offset, q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        return _math.attention(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, softcap,
                               alibi_slopes, keep=keep)


# Tried in order; the last serves every call.
registry = [CatalogueBackend(), SdpaBackend()]
_warned = set()


def strict_mode(strict):
    if strict is not None:
        return bool(strict)
    return os.environ.get("FMHA_STRICT", "").lower() in ("1", "true", "yes", "on")


def choose(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, softcap=0.0, alibi_slopes=None,
           dropout_seed_offset=None):
    """(backend, Choice) for the call; the Choice of a fallback carries every earlier backend's
    reason for passing it over."""
    passed_over = []
    for backend in registry:
        choice, why_not = backend.choose(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, softcap,
                                         alibi_slopes, dropout_seed_offset)
        if choice is not None:
            if passed_over:
                choice.reason = "; ".join(passed_over)
            return backend, choice
        passed_over.append(f"not {backend.name}: {why_not}")
    raise UnsupportedError("no backend serves the call: " + "; ".join(passed_over))


def fall_back(reason, strict, instead="running on PyTorch's scaled_dot_product_attention"):
    """The catalogue passed a call over: UnsupportedError in strict mode, else a FallbackWarning
    once per reason."""
    if strict_mode(strict):
        raise UnsupportedError(f"fmha strict mode: no catalogue kernel serves this call ({reason})")
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"fmha: {instead}: {reason}", FallbackWarning, stacklevel=5)


def run(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, strict, softcap=0.0,
        alibi_slopes=None, dropout_seed_offset=None):
    """(out, LSE or None) by the first backend that serves the call; forward only (fmha._ops adds
    autograd). dropout_seed_offset: the kernels' dropout seed and offset (fmha._dropout), else
    None (PyTorch's dropout)."""
    backend, choice = choose(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, softcap, alibi_slopes,
                             dropout_seed_offset)
    if backend is not registry[0]:
        fall_back(choice.reason, strict)
    return backend.forward(choice, q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, softcap,
                           alibi_slopes, dropout_seed_offset)


def which_backend(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                  seqlens_q=None, seqlens_kv=None, softcap=0.0, alibi_slopes=None):
    """The Choice that flash_attn_func (or, with per-sequence lengths, the varlen and KV-cache
    functions) would make for these arguments: `.backend` is "fmha" or "sdpa", `.kernel` the
    catalogue kernel's name, `.reason` why."""
    _checks.qkv(q, k, v)
    scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
    left, right = _checks.window(window_size, causal)
    softcap = _checks.softcap(softcap)
    _checks.alibi_slopes(alibi_slopes, q.shape[0], q.shape[2], q.device)
    return choose(q, k, v, seqlens_q, seqlens_kv, scale, left, right, _checks.dropout(dropout_p), softcap,
                  alibi_slopes)[1]
