"""fmha: the catalogue's attention kernels behind FlashAttention's Python API.

    from fmha import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)   # q [batch, seqlen, heads, head_dim], fp16/bf16

Calls no kernel serves run on PyTorch's scaled_dot_product_attention with a one-time
FallbackWarning (strict=True or FMHA_STRICT=1: UnsupportedError); which_backend() says which
would serve a call. See docs/python.md.
"""
__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_qkvpacked_func",
           "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
           "FlashAttention", "which_backend", "FallbackWarning", "UnsupportedError"]

try:
    import torch  # noqa: F401
except ImportError as error:  # fmha._library (ctypes, no PyTorch) stays importable
    _missing_torch = error

    def __getattr__(name):
        if name in __all__:
            raise ImportError(f"fmha.{name} needs PyTorch, which this Python cannot import ({_missing_torch})")
        raise AttributeError(f"module 'fmha' has no attribute {name!r}")
else:
    from .backends import FallbackWarning, UnsupportedError, which_backend
    from .interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func,
                            flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)
    from .module import FlashAttention
