"""Argument checks of the public functions: a TypeError or ValueError that names the argument
and what was expected. Only shapes, dtypes and devices are read (torch.compile traces these)."""
import math

import torch

_LAYOUT_4D = "[batch, seqlen, heads, head_dim]"


def _tensor(name, t, rank, layout):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name} must be {rank}-D {layout}, got shape {tuple(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor (float16 or bfloat16 for the kernels), got {t.dtype}")
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got strides {tuple(t.stride())}: "
                         f"pass {name}.contiguous()")
    if t.shape[-1] == 0 or t.shape[-2] == 0:  # (no tokens at all is a call: fmha._math.no_keys)
        raise ValueError(f"{name} must have heads and head_dim, got shape {tuple(t.shape)}")


def qkv(q, k, v, rank=4, layout=_LAYOUT_4D, same_batch=True):
    """q [..., heads, head_dim], k and v [..., heads_kv, head_dim]: one dtype, one device, heads_kv
    dividing heads, one head_dim, and batch (rank 4, unless not same_batch) matching."""
    _tensor("q", q, rank, layout)
    _tensor("k", k, rank, layout.replace("seqlen", "seqlen_kv").replace("heads", "heads_kv"))
    _tensor("v", v, rank, layout.replace("seqlen", "seqlen_kv").replace("heads", "heads_kv"))
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if rank == 4 and same_batch and q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have one batch size, got {q.shape[0]} and {k.shape[0]}")
    heads, heads_kv = q.shape[-2], k.shape[-2]
    if heads % heads_kv != 0:
        raise ValueError(f"q's heads ({heads}) must be a multiple of k's and v's heads ({heads_kv}) (GQA/MQA)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q's head_dim ({q.shape[-1]}) and k's and v's ({k.shape[-1]}) must be equal")


def softmax_scale(scale, head_dim):
    """The scale to use: 1/sqrt(head_dim) for None."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"softmax_scale must be a float or None, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale == 0:
        raise ValueError(f"softmax_scale must be finite and non-zero, got {scale}")
    return float(scale)


def dropout(p):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {p!r}")
    return float(p)


def deterministic(value):
    """FlashAttention's flag: True asks the backward kernels to add dQ's partial sums in a fixed
    order (bitwise-reproducible gradients, at some speed); a PyTorch recompute is so anyway."""
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise ValueError(f"deterministic must be True or False, got {value!r}")
    return bool(value)


def window(window_size, causal):
    """FlashAttention's (left, right) window, -1 for unbounded, with causal as right = 0: query i
    of a sequence sees key j iff i + len_kv - len_q - left <= j <= i + len_kv - len_q + right."""
    if not isinstance(causal, (bool, int)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size must be a pair of ints >= -1 (-1: unbounded), got {window_size!r}")
    left, right = window_size
    for w in (left, right):
        if not isinstance(w, int) or isinstance(w, bool) or w < -1:
            raise ValueError(f"window_size must be a pair of ints >= -1 (-1: unbounded), got {window_size!r}")
    return left, 0 if causal else right


def lengths(name, t, batch, device):
    """Per-sequence lengths or cumulative offsets: int32, 1-D [batch], on the tensors' device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] != batch:
        raise ValueError(f"{name} must be 1-D with {batch} entries, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device} with q, k and v, got {t.device}")


def count(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def softcap(value):
    """FlashAttention's softcap: 0 (off) or a finite positive cap."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"softcap must be a finite float >= 0 (0: off), got {value!r}")
    return float(value)


def alibi_slopes(slopes, batch, heads, device):
    """FlashAttention's ALiBi slopes: fp32 [heads] or [batch, heads] on the tensors' device, or None."""
    if slopes is None:
        return
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"alibi_slopes must be a torch.Tensor of float32, got {type(slopes).__name__}")
    if slopes.dtype != torch.float32:
        raise TypeError(f"alibi_slopes must be float32, got {slopes.dtype}")
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes must be [heads] ({heads},) or [batch, heads] ({batch}, {heads}), "
                         f"got shape {tuple(slopes.shape)}")
    if slopes.device != device:
        raise ValueError(f"alibi_slopes must be on {device} with q, k and v, got {slopes.device}")


def block_table(table, batch, device):
    """FlashAttention's block table: int32 [batch, max_blocks_per_seq] on the tensors' device."""
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"block_table must be a torch.Tensor of int32, got {type(table).__name__}")
    if table.dtype != torch.int32:
        raise TypeError(f"block_table must be int32, got {table.dtype}")
    if table.dim() != 2 or table.shape[0] != batch or table.shape[1] == 0:
        raise ValueError(f"block_table must be 2-D [batch ({batch}), max_blocks_per_seq >= 1], got shape "
                         f"{tuple(table.shape)}")
    if table.device != device:
        raise ValueError(f"block_table must be on {device} with q, k and v, got {table.device}")


def paged_qkv(q, k_cache, v_cache, rank=4, layout=_LAYOUT_4D):
    """q (rank 4, or 3 for packed tokens) and a paged cache: k_cache, v_cache [num_blocks,
    page_block_size, heads_kv, head_dim] with q's dtype, device and head_dim."""
    _tensor("q", q, rank, layout)
    _tensor("k_cache", k_cache, 4, "[num_blocks, page_block_size, heads_kv, head_dim] with block_table")
    _tensor("v_cache", v_cache, 4, "[num_blocks, page_block_size, heads_kv, head_dim] with block_table")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise TypeError(f"q, k_cache and v_cache must have one dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if not (q.device == k_cache.device == v_cache.device):
        raise ValueError(f"q, k_cache and v_cache must be on one device, got {q.device}, {k_cache.device}, "
                         f"{v_cache.device}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    if q.shape[-2] % k_cache.shape[2] != 0:
        raise ValueError(f"q's heads ({q.shape[-2]}) must be a multiple of the cache's heads ({k_cache.shape[2]}) (GQA/MQA)")
    if q.shape[-1] != k_cache.shape[3]:
        raise ValueError(f"q's head_dim ({q.shape[-1]}) and the cache's ({k_cache.shape[3]}) must be equal")
