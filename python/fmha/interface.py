"""FlashAttention's Python API over the catalogue: tensors [batch, seqlen, heads, head_dim],
GQA/MQA from the head counts, causal masks bottom-right aligned, LSE in natural log."""
import torch

from . import _catalogue, _checks, _fastpath
from ._ops import attention


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    return_lse=False, *, strict=None):
    """Attention of q [batch, seqlen_q, heads, head_dim] over k, v [batch, seqlen_kv, heads_kv,
    head_dim]; heads a multiple of heads_kv. Returns out like q, and with return_lse also each
    row's log-sum-exp, fp32 [batch, heads, seqlen_q].

    causal: query i sees keys j <= i + seqlen_kv - seqlen_q (bottom-right). window_size
    (left, right): keys within [i + seqlen_kv - seqlen_q - left, ... + right]; -1 is unbounded.
    strict: raise fmha.UnsupportedError instead of falling back to PyTorch's attention
    (default: the FMHA_STRICT environment variable). Views whose last dimension is contiguous
    are read in place.
    """
    key, result = _fastpath.run("flash_attn_func", (q, k, v), (dropout_p, softmax_scale, causal, window_size), None,
                                return_lse)
    if result is None:
        _checks.qkv(q, k, v)
        scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
        left, right = _checks.window(window_size, causal)
        dropout_p = _checks.dropout(dropout_p)
        _fastpath.keep(key, q, k, v, None, scale, left, right, dropout_p)
        result = attention(q, k, v, None, None, scale, left, right, dropout_p, return_lse, strict)
    return result if return_lse else result[0]


def _padded(x, cu_seqlens, max_seqlen):
    """Packed tokens x [total, heads, d] as a padded batch [batch, max_seqlen, heads, d]; rows past
    a sequence's end repeat a valid token and are never read (the lengths say so)."""
    offsets = torch.arange(max_seqlen, device=x.device)
    tokens = (cu_seqlens[:-1].long().unsqueeze(1) + offsets).clamp_(0, x.shape[0] - 1)
    return x[tokens]


def _check_cu_seqlens(name, cu_seqlens, total, max_seqlen):
    """Values too: one device-to-host copy, skipped while a CUDA graph is captured or compiled."""
    if torch.compiler.is_compiling() or (cu_seqlens.is_cuda and torch.cuda.is_current_stream_capturing()):
        return
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    first, last, shortest, longest = torch.stack(
        [cu_seqlens[0], cu_seqlens[-1], lengths.min(), lengths.max()]).tolist()
    if first != 0 or last != total or shortest < 0 or longest > max_seqlen:
        raise ValueError(f"{name} must rise from 0 to the token count {total} in steps of at most {max_seqlen} "
                         f"(max_seqlen): got first {first}, last {last}, steps {shortest} to {longest}")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), return_lse=False, *, strict=None):
    """Attention over packed sequences: q [total_q, heads, head_dim], k, v [total_k, heads_kv,
    head_dim]; sequence b holds tokens cu_seqlens[b] to cu_seqlens[b + 1] (int32 [batch + 1]).
    Returns out like q, and with return_lse the LSE, fp32 [heads, total_q].

    The kernels read the packed tokens in place. Calls they do not serve, and calls with
    autograd or under torch.compile, take the padded path: the tokens gathered into a padded
    batch ([batch, max_seqlen, heads, head_dim]) with per-sequence lengths, the output scattered
    back.
    """
    _checks.qkv(q, k, v, rank=3, layout="[total_tokens, heads, head_dim]")
    _checks.positive_int("max_seqlen_q", max_seqlen_q)
    _checks.positive_int("max_seqlen_k", max_seqlen_k)
    if not isinstance(cu_seqlens_q, torch.Tensor) or cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 2:
        raise ValueError("cu_seqlens_q must be a 1-D int32 tensor [batch + 1] of cumulative sequence lengths")
    batch = cu_seqlens_q.shape[0] - 1
    _checks.lengths("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    _checks.lengths("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q)
    _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k)
    scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
    left, right = _checks.window(window_size, causal)
    dropout_p = _checks.dropout(dropout_p)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if not needs_grad and not torch.compiler.is_compiling() and cu_seqlens_q.is_contiguous() and cu_seqlens_k.is_contiguous():
        launch, _ = _catalogue.prepare(q, k, v, None, scale, left, right, dropout_p,
                                       packed=(batch, max_seqlen_q, max_seqlen_k))
        if launch is not None:
            out, lse = _catalogue.forward_packed(launch, q, k, v, cu_seqlens_q, cu_seqlens_k, None, return_lse)
            return (out, lse) if return_lse else out
    seqlens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).contiguous()
    seqlens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).contiguous()
    out, lse = attention(_padded(q, cu_seqlens_q, max_seqlen_q), _padded(k, cu_seqlens_k, max_seqlen_k),
                         _padded(v, cu_seqlens_k, max_seqlen_k), seqlens_q, seqlens_k, scale, left, right,
                         dropout_p, return_lse, strict)
    # Each token's sequence and position in it, to read its row of the padded output.
    tokens = torch.arange(q.shape[0], device=q.device)
    sequence = torch.searchsorted(cu_seqlens_q[1:].long(), tokens, right=True).clamp_(max=batch - 1)
    position = (tokens - cu_seqlens_q.long()[sequence]).clamp_(0, max_seqlen_q - 1)
    out = out[sequence, position]
    if not return_lse:
        return out
    return out, lse[sequence, :, position].transpose(0, 1).contiguous()


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, strict=None):
    """A decode step: q [batch, seqlen_q, heads, head_dim] against a cache k_cache, v_cache
    [batch, capacity, heads_kv, head_dim] of which each sequence has filled cache_seqlens
    (an int, or int32 [batch]; None: all of it). New keys and values k, v [batch, seqlen_new,
    heads_kv, head_dim] are first written into the cache after them (in place), as in
    FlashAttention. causal aligns each sequence's last query with its last key.
    Positions past the capacity are not written (the last slot is, instead): keep
    cache_seqlens + seqlen_new <= capacity. Returns out, and with return_softmax_lse the LSE.
    """
    if not (rotary_cos is None and rotary_sin is None and cache_batch_idx is None and cache_leftpad is None and
            block_table is None and softcap == 0.0 and alibi_slopes is None):
        unsupported = {"rotary_cos": rotary_cos is not None, "rotary_sin": rotary_sin is not None,
                       "cache_batch_idx": cache_batch_idx is not None, "cache_leftpad": cache_leftpad is not None,
                       "block_table": block_table is not None, "softcap": softcap != 0.0,
                       "alibi_slopes": alibi_slopes is not None}
        named = [name for name, given in unsupported.items() if given]
        raise NotImplementedError(f"flash_attn_with_kvcache: {', '.join(named)} not supported by fmha yet")
    key = None  # a decode step without new keys: the fast path's kind of call
    if k is None and v is None and (cache_seqlens is None or isinstance(cache_seqlens, torch.Tensor)):
        tensors = (q, k_cache, v_cache) if cache_seqlens is None else (q, k_cache, v_cache, cache_seqlens)
        key, result = _fastpath.run("flash_attn_with_kvcache", tensors, (softmax_scale, causal, window_size),
                                    cache_seqlens, return_softmax_lse)
        if result is not None:
            return result if return_softmax_lse else result[0]
    _checks.qkv(q, k_cache, v_cache)
    batch, capacity = k_cache.shape[0], k_cache.shape[1]
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (new keys and values to append), or neither")
    appended = 0
    if k is not None:
        _checks.qkv(q, k, v)
        if k.shape[2:] != k_cache.shape[2:]:
            raise ValueError(f"k ({tuple(k.shape)}) must match k_cache's heads and head_dim ({tuple(k_cache.shape)})")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens is needed with k and v: where in the cache to write them")
        appended = k.shape[1]
    scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
    left, right = _checks.window(window_size, causal)

    seqlens_kv = None
    if cache_seqlens is None:
        keys = capacity
    elif isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        keys = cache_seqlens + appended
        if not 0 <= cache_seqlens or not 0 < keys <= capacity:
            raise ValueError(f"cache_seqlens ({cache_seqlens}) + new tokens ({appended}) must be in [1, capacity "
                             f"{capacity}]")
        if appended:
            k_cache[:, cache_seqlens:keys] = k
            v_cache[:, cache_seqlens:keys] = v
        k_cache, v_cache = k_cache[:, :keys], v_cache[:, :keys]
    else:
        _checks.lengths("cache_seqlens", cache_seqlens, batch, q.device)
        keys = capacity
        seqlens_kv = cache_seqlens
        if appended:
            positions = (cache_seqlens.long().unsqueeze(1) + torch.arange(appended, device=q.device)).clamp_(
                max=capacity - 1)
            rows = torch.arange(batch, device=q.device).unsqueeze(1)
            k_cache[rows, positions] = k
            v_cache[rows, positions] = v
            seqlens_kv = cache_seqlens + appended
        seqlens_kv = seqlens_kv.contiguous()
    _fastpath.keep(key, q, k_cache, v_cache, None, scale, left, right, 0.0, cache_seqlens)
    out, lse = attention(q, k_cache, v_cache, None, seqlens_kv, scale, left, right, 0.0, return_softmax_lse, strict)
    return (out, lse) if return_softmax_lse else out
