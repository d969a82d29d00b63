"""The Python API (python/fmha) on PyTorch tensors: every function against an fp64 reference by
FlashAttention's rule (error at most twice that of the same attention computed by PyTorch in the
inputs' dtype), autograd, torch.compile, CUDA graphs, fallback and strict mode, bad inputs, and
fmha.exe's results. Skips, saying why, where PyTorch or a GPU is missing."""
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_BIN = Path(os.environ.get("FMHA_BIN_DIR", _REPO / "bin"))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/python: loaded by path from fmha_test.py too
from torch_setup import needs_cuda, needs_torch, torch  # noqa: E402

fmha, _IMPORT_ERROR = None, None
if torch is not None:
    try:
        import fmha
        from fmha import backends as _backends
    except Exception as error:  # reported by test_torch_package_imports, not as a collection error
        _IMPORT_ERROR = error


def _api():
    if fmha is None:
        pytest.fail(f"import fmha failed: {_IMPORT_ERROR!r}")
    return fmha


# ---------------------------------------------------------------- references and comparison

def _reference(q, k, v, causal=False, window=(-1, -1), scale=None, seqlens_q=None, seqlens_kv=None, dtype=None,
               softcap=0.0, alibi=None):
    """Attention computed sequence by sequence in `dtype` (fp64 for the reference, q's dtype for
    PyTorch's own error): (out [b, s_q, h, d] in q's dtype or fp64, LSE [b, h, s_q]). softcap and
    alibi (slopes [h] or [b, h]) by FlashAttention's test reference: s = softcap * tanh(s / softcap),
    then s - slope * |i + len_kv - len_q - j|."""
    dtype = dtype or torch.float64
    batch, seqlen_q, heads, head_dim = q.shape
    group = heads // k.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    left, right = window[0], 0 if causal else window[1]
    out = torch.zeros(q.shape, dtype=dtype, device=q.device)
    lse = torch.full((batch, heads, seqlen_q), float("-inf"), dtype=torch.float64, device=q.device)
    for b in range(batch):
        len_q = int(seqlens_q[b]) if seqlens_q is not None else seqlen_q
        len_kv = int(seqlens_kv[b]) if seqlens_kv is not None else k.shape[1]
        qb = q[b, :len_q].transpose(0, 1).to(dtype)                                  # [h, lq, d]
        kb = k[b, :len_kv].transpose(0, 1).to(dtype).repeat_interleave(group, dim=0)  # [h, lk, d]
        vb = v[b, :len_kv].transpose(0, 1).to(dtype).repeat_interleave(group, dim=0)
        scores = torch.matmul(qb, kb.transpose(1, 2)) * scale
        rows = torch.arange(len_q, device=q.device).unsqueeze(1) + len_kv - len_q
        keys = torch.arange(len_kv, device=q.device).unsqueeze(0)
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        if alibi is not None:
            slopes = (alibi[b] if alibi.dim() == 2 else alibi).to(dtype).view(-1, 1, 1)
            scores = scores - slopes * (rows - keys).abs().to(dtype)
        visible = torch.ones(len_q, len_kv, dtype=torch.bool, device=q.device)
        if right >= 0:
            visible &= keys <= rows + right
        if left >= 0:
            visible &= keys >= rows - left
        scores = scores.masked_fill(~visible, float("-inf"))
        lse[b, :, :len_q] = torch.logsumexp(scores.double(), dim=-1)
        probabilities = torch.softmax(scores.float(), dim=-1).to(dtype).nan_to_num(0.0)
        out[b, :len_q] = torch.matmul(probabilities, vb).transpose(0, 1)
    return out, lse


def _random(*shape, dtype=torch.float16 if torch else None, device="cuda"):
    return torch.randn(*shape, dtype=dtype, device=device)


def _assert_flash_rule(out, reference, pytorch, what="out"):
    """FlashAttention's test rule: our error at most twice PyTorch's in the same dtype."""
    ours = (out.double() - reference.double()).abs().max().item()
    theirs = (pytorch.double() - reference.double()).abs().max().item()
    assert not torch.isnan(out).any(), f"{what} has NaN"
    assert ours <= 2 * theirs + 1e-5, f"{what}: max error {ours:.3g} > 2 x PyTorch's {theirs:.3g}"


def _check_call(q, k, v, **options):
    """flash_attn_func served by the catalogue and right by the rule, LSE included."""
    api = _api()
    causal, window = options.get("causal", False), options.get("window_size", (-1, -1))
    choice = api.which_backend(q, k, v, causal=causal, window_size=window)
    assert choice.backend == "fmha", f"not served by the catalogue: {choice}"
    out, lse = api.flash_attn_func(q, k, v, return_lse=True, strict=True, **options)
    reference, reference_lse = _reference(q, k, v, causal, window)
    pytorch, _ = _reference(q, k, v, causal, window, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)
    return out


# ---------------------------------------------------------------- no GPU needed

@needs_torch
def test_torch_package_imports():
    api = _api()
    assert callable(api.flash_attn_func) and issubclass(api.FlashAttention, torch.nn.Module)
    assert hasattr(torch.ops.fmha, "attention")


@needs_torch
@pytest.mark.parametrize("make_args, error, message", [
    (lambda: ([1.0], "k", "v"), TypeError, "q must be a torch.Tensor, got list"),
    (lambda: (torch.zeros(2, 4, 8, 64, dtype=torch.int32),) * 3, TypeError, "q must be a floating-point tensor"),
    (lambda: (torch.zeros(4, 8, 64), torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 8, 64)), ValueError,
     "q must be 4-D [batch, seqlen, heads, head_dim], got shape (4, 8, 64)"),
    (lambda: (torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 3, 64), torch.zeros(2, 4, 3, 64)), ValueError,
     "q's heads (8) must be a multiple of k's and v's heads (3)"),
    (lambda: (torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 8, 32), torch.zeros(2, 4, 8, 32)), ValueError,
     "q's head_dim (64) and k's and v's (32) must be equal"),
    (lambda: (torch.zeros(2, 4, 64, 8).transpose(2, 3), torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 8, 64)),
     ValueError, "q must have a contiguous last dimension"),
    (lambda: (torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 8, 64, dtype=torch.float64), torch.zeros(2, 4, 8, 64)),
     TypeError, "q, k and v must have one dtype"),
    (lambda: (torch.zeros(2, 4, 8, 64), torch.zeros(3, 4, 8, 64), torch.zeros(3, 4, 8, 64)), ValueError,
     "q and k must have one batch size, got 2 and 3"),
    (lambda: (torch.zeros(2, 4, 8, 64), torch.zeros(2, 4, 8, 64), torch.zeros(2, 5, 8, 64)), ValueError,
     "k and v must have one shape"),
])
def test_torch_bad_tensors_raise_naming_the_argument(make_args, error, message):
    with pytest.raises(error) as raised:
        _api().flash_attn_func(*make_args())
    assert message in str(raised.value)


@needs_torch
@pytest.mark.parametrize("options, error, message", [
    ({"window_size": (-2, 0)}, ValueError, "window_size must be a pair of ints >= -1"),
    ({"window_size": 5}, ValueError, "window_size must be a pair"),
    ({"dropout_p": 1.5}, ValueError, "dropout_p must be a float in [0, 1)"),
    ({"softmax_scale": "x"}, TypeError, "softmax_scale must be a float or None, got str"),
    ({"softmax_scale": float("nan")}, ValueError, "softmax_scale must be finite"),
    ({"causal": "yes"}, TypeError, "causal must be a bool"),
])
def test_torch_bad_options_raise_naming_the_argument(options, error, message):
    q = torch.zeros(1, 4, 2, 64)
    with pytest.raises(error) as raised:
        _api().flash_attn_func(q, q, q, **options)
    assert message in str(raised.value)


@needs_torch
def test_torch_bad_cu_seqlens_raise():
    api = _api()
    q = torch.zeros(10, 2, 64)
    good = torch.tensor([0, 4, 10], dtype=torch.int32)
    cases = [
        (good.long(), TypeError, "cu_seqlens_q must be int32"),
        (torch.tensor([[0, 10]], dtype=torch.int32), ValueError, "cu_seqlens_q must be a 1-D int32 tensor"),
        (torch.tensor([0, 6, 4], dtype=torch.int32), ValueError, "cu_seqlens_q must rise from 0 to the token count 10"),
        (torch.tensor([0, 4, 9], dtype=torch.int32), ValueError, "last 9"),
        (torch.tensor([0, 1, 10], dtype=torch.int32), ValueError, "steps of at most 8"),
    ]
    for cu_seqlens, error, message in cases:
        with pytest.raises(error) as raised:
            api.flash_attn_varlen_func(q, q, q, cu_seqlens, good, 8, 8)
        assert message in str(raised.value)
    with pytest.raises(ValueError, match="cu_seqlens_k must be 1-D with 3 entries"):
        api.flash_attn_varlen_func(q, q, q, good, torch.tensor([0, 10], dtype=torch.int32), 8, 8)
    with pytest.raises(ValueError, match="max_seqlen_q must be an int >= 0"):
        api.flash_attn_varlen_func(q, q, q, good, good, -1, 8)
    with pytest.raises(ValueError, match="steps of at most 0"):
        api.flash_attn_varlen_func(q, q, q, good, good, 0, 8)


@needs_torch
def test_torch_calls_without_queries_or_keys_give_zeros():
    """FlashAttention takes calls with no query or no key at all: out 0 and, as for every row
    that sees no key, LSE -inf; the gradients are 0."""
    api = _api()
    q = torch.randn(2, 5, 4, 64, requires_grad=True)
    no_keys = torch.randn(2, 0, 2, 64, requires_grad=True)
    out, lse = api.flash_attn_func(q, no_keys, no_keys, causal=True, return_lse=True)
    assert out.shape == q.shape and not out.any()
    assert lse.shape == (2, 4, 5) and (lse == -math.inf).all()
    out.sum().backward()
    assert q.grad.shape == q.shape and not q.grad.any() and no_keys.grad.shape == no_keys.shape
    keys = torch.randn(2, 7, 2, 64)
    assert api.flash_attn_func(torch.randn(2, 0, 4, 64), keys, keys).shape == (2, 0, 4, 64)
    none = torch.zeros(3, dtype=torch.int32)
    tokens = torch.randn(0, 4, 64)
    out, lse = api.flash_attn_varlen_func(tokens, tokens, tokens, none, none, 0, 0, return_lse=True)
    assert out.shape == (0, 4, 64) and lse.shape == (4, 0)
    q = torch.randn(7, 4, 64)
    out, lse = api.flash_attn_varlen_func(q, tokens, tokens, torch.tensor([0, 3, 7], dtype=torch.int32), none, 4, 0,
                                          return_lse=True)
    assert out.shape == q.shape and not out.any() and (lse == -math.inf).all()
    cache = torch.randn(2, 16, 4, 64)
    out, lse = api.flash_attn_with_kvcache(torch.randn(2, 1, 4, 64), cache, cache, cache_seqlens=0,
                                           return_softmax_lse=True)
    assert out.shape == (2, 1, 4, 64) and not out.any() and (lse == -math.inf).all()


@needs_torch
def test_torch_cu_seqlens_written_in_place_are_checked_again():
    # A check's reading of cu_seqlens is kept per tensor and version (a serving step's layers pass
    # one tensor): writing it in place must make the next call read it again.
    api = _api()
    q = torch.randn(10, 2, 64)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    api.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)
    cu[1] = 1  # steps 1 and 9
    with pytest.raises(ValueError, match="steps 1 to 9"):
        api.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)
    cu.copy_(torch.tensor([0, 6, 10], dtype=torch.int32))
    out = api.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)
    assert torch.isfinite(out).all()
    with torch.inference_mode():  # inference tensors keep no version: read at every call
        cu = torch.tensor([0, 4, 10], dtype=torch.int32)
        api.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)
        cu[1] = 1
        with pytest.raises(ValueError, match="steps 1 to 9"):
            api.flash_attn_varlen_func(q, q, q, cu, cu, 8, 8)


@needs_torch
def test_torch_kvcache_rejects_what_it_does_not_support():
    api = _api()
    q, cache = torch.zeros(2, 1, 4, 64), torch.zeros(2, 16, 4, 64)
    with pytest.raises(ValueError, match="rotary_cos and rotary_sin must be given together"):
        api.flash_attn_with_kvcache(q, cache, cache, rotary_cos=q)
    with pytest.raises(ValueError, match="cache_leftpad needs cache_seqlens"):
        api.flash_attn_with_kvcache(q, cache, cache, cache_leftpad=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="cache_leftpad cannot be combined with block_table"):
        api.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3, cache_leftpad=torch.zeros(2, dtype=torch.int32),
                                    block_table=torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="k and v must be given together"):
        api.flash_attn_with_kvcache(q, cache, cache, k=torch.zeros(2, 1, 4, 64), cache_seqlens=3)
    with pytest.raises(ValueError, match=r"cache_seqlens \(16\) \+ new tokens \(1\) must be in \[0, capacity 16\]"):
        api.flash_attn_with_kvcache(q, cache, cache, k=q, v=q, cache_seqlens=16)
    with pytest.raises(TypeError, match="cache_seqlens must be int32"):
        api.flash_attn_with_kvcache(q, cache, cache, cache_seqlens=torch.tensor([1, 2]))


@needs_torch
def test_torch_cpu_tensors_fall_back_correctly():
    api = _api()
    q, k, v = (torch.randn(2, 5, 4, 64, dtype=torch.float32) for _ in range(3))
    choice = api.which_backend(q, k[:, :, :2], v[:, :, :2], causal=True)
    assert choice.backend == "sdpa" and "on cpu" in choice.reason
    _backends._warned.clear()
    with pytest.warns(api.FallbackWarning, match="on cpu"):
        out, lse = api.flash_attn_func(q, k[:, :, :2], v[:, :, :2], causal=True, return_lse=True)
    reference, reference_lse = _reference(q, k[:, :, :2], v[:, :, :2], causal=True)
    torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), reference_lse, atol=1e-5, rtol=1e-5)
    with pytest.raises(api.UnsupportedError, match="strict mode.*on cpu"):
        api.flash_attn_func(q, k, v, strict=True)


# ---------------------------------------------------------------- on the GPU

_SHAPES = [  # batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal, window
    (4, 1, 2, 16, 16, 256, False, (-1, -1)),   # the headline's shape, small batch
    (3, 1, 300, 8, 2, 128, False, (-1, -1)),   # decode, GQA
    (2, 4, 513, 8, 1, 64, True, (-1, -1)),     # decode, MQA, causal bottom-right
    (1, 3, 4000, 4, 4, 128, False, (-1, -1)),  # few long sequences: split keys, workspace
    (2, 128, 128, 4, 4, 128, True, (-1, -1)),  # prefill, causal
    (1, 77, 200, 8, 2, 64, False, (-1, -1)),   # prefill, odd lengths, GQA
    (2, 256, 256, 4, 4, 256, True, (63, 0)),   # causal sliding window
    (2, 200, 300, 4, 2, 128, False, (31, 0)),  # (left, 0) is a causal window even without causal
    (2, 300, 100, 4, 2, 128, True, (-1, -1)),  # causal, seqlen_q > seqlen_kv: the first rows see no key
    (2, 200, 300, 4, 2, 64, False, (16, 8)),   # local attention, both sides bounded
    (1, 129, 129, 8, 8, 256, False, (-1, 5)),  # right side only
    (2, 64, 1000, 4, 1, 128, False, (100, -1)),  # left side only, MQA
    (3, 2, 700, 8, 2, 128, False, (40, 3)),    # decode rows, a window far before the last keys
    (2, 100, 150, 4, 2, 80, True, (-1, -1)),   # head_dim 80 on a larger kernel (zero-filled columns)
    (1, 3, 300, 8, 1, 40, False, (-1, -1)),    # decode rows, head_dim 40
    (1, 65, 65, 4, 4, 200, False, (20, 20)),   # head_dim 200 on the d256 kernel, a two-sided window
    (2, 97, 203, 9, 3, 59, True, (-1, -1)),    # head_dim 59: element rows (118-byte rows) on the d64 kernel
    (1, 130, 77, 9, 1, 111, False, (-1, -1)),  # head_dim 111, MQA, more queries than keys
    (3, 1, 239, 6, 3, 59, True, (-1, -1)),     # decode rows with element rows (no decode kernel reads them)
]


@needs_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "b{}_sq{}_skv{}_h{}_{}_d{}_{}_w{}".format(*s[:6], "causal" if s[6] else "nomask", s[7][0]))
def test_torch_flash_attn_func_matches_fp64(shape, dtype):
    batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal, window = shape
    dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    q = _random(batch, seqlen_q, heads, head_dim, dtype=dtype)
    k, v = (_random(batch, seqlen_kv, heads_kv, head_dim, dtype=dtype) for _ in range(2))
    _check_call(q, k, v, causal=causal, window_size=window)


@needs_cuda
def test_torch_every_head_dim_runs_on_the_kernels():
    """FlashAttention serves every head_dim up to 256; so do the kernels, a smaller one on the
    next larger kernel (one that is not a multiple of 8 on the tensor-core family, element by
    element); past 256 the call falls back, saying why."""
    api = _api()
    for head_dim in list(range(8, 257, 8)) + [1, 3, 59, 111, 255]:
        for seqlen_q in (1, 130):
            q = _random(2, seqlen_q, 4, head_dim)
            k, v = (_random(2, 140, 2, head_dim) for _ in range(2))
            choice = api.which_backend(q, k, v, causal=seqlen_q > 1)
            assert choice.backend == "fmha", f"head_dim {head_dim}, seqlen_q {seqlen_q}: {choice}"
            if head_dim % 8:
                assert "mmaprefill" in choice.reason, choice
    q, k, v = (_random(1, 16, 2, 264) for _ in range(3))
    assert api.which_backend(q, k, v).backend == "sdpa"


@needs_cuda
@pytest.mark.parametrize("head_dim", [59, 111])
def test_torch_element_rows_read_packed_tensors_in_place(head_dim):
    """Element rows through the packed entry points: qkv [b, s, 3, h, 59] and varlen tokens read
    in place (rows, heads and the three tensors an odd number of elements apart), against the
    fp64 reference."""
    api = _api()
    torch.manual_seed(head_dim)
    qkv = _random(2, 150, 3, 6, head_dim)
    out = api.flash_attn_qkvpacked_func(qkv, causal=True, strict=True)
    q, k, v = qkv.unbind(2)
    reference, _ = _reference(q, k, v, True)
    _assert_flash_rule(out, reference, _reference(q, k, v, True, dtype=q.dtype)[0])
    lengths = [37, 1, 200]
    cu = torch.tensor([0] + list(itertools.accumulate(lengths)), dtype=torch.int32, device="cuda")
    tq, tk, tv = (_random(int(cu[-1]), h, head_dim) for h in (6, 2, 2))
    out = api.flash_attn_varlen_func(tq, tk, tv, cu, cu, max(lengths), max(lengths), causal=True, strict=True)
    for b, n in enumerate(lengths):
        rows = slice(int(cu[b]), int(cu[b + 1]))
        sq, sk, sv = (t[rows].unsqueeze(0) for t in (tq, tk, tv))
        expected, _ = _reference(sq, sk, sv, True)
        _assert_flash_rule(out[rows].unsqueeze(0), expected, _reference(sq, sk, sv, True, dtype=sq.dtype)[0])


@needs_cuda
def test_torch_strided_views_are_read_in_place():
    """Q in the seed's [b, h, s, d] layout and K, V from a packed [b, s, 2, h, d] buffer, as views."""
    torch.manual_seed(1)
    batch, seqlen, heads, head_dim = 4, 512, 8, 128
    q = _random(batch, heads, seqlen, head_dim).transpose(1, 2)
    kv = _random(batch, seqlen, 2, heads, head_dim)
    k, v = kv[:, :, 0], kv[:, :, 1]
    _check_call(q, k, v, causal=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = _api().flash_attn_func(q, k, v, causal=True)
    # The call allocates its output (4 MiB) and no more: a copy of q, k or v would add 4 MiB.
    assert torch.cuda.max_memory_allocated() - before <= out.numel() * out.element_size() + (1 << 20)


def _check_varlen(out, lse, q, k, v, cu_q, cu_k, causal):
    """Each packed sequence's rows of out and lse against the fp64 reference (FlashAttention's rule)."""
    for b in range(cu_q.shape[0] - 1):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if rows.start == rows.stop:  # an empty sequence
            continue
        args = (q[rows].unsqueeze(0), k[keys].unsqueeze(0), v[keys].unsqueeze(0))
        reference, reference_lse = _reference(*args, causal=causal)
        pytorch, _ = _reference(*args, causal=causal, dtype=q.dtype)
        _assert_flash_rule(out[rows].unsqueeze(0), reference, pytorch, f"sequence {b}")
        torch.testing.assert_close(lse[:, rows].double(), reference_lse[0], atol=2e-3, rtol=1e-3)


@needs_cuda
@pytest.mark.parametrize("causal", [False, True])
def test_torch_varlen_matches_fp64(causal):
    api = _api()
    torch.manual_seed(2)
    lengths_q, lengths_k = [5, 1, 37, 64], [17, 1, 64, 90]
    cu_q = torch.tensor([0] + lengths_q, device="cuda").cumsum(0).int()
    cu_k = torch.tensor([0] + lengths_k, device="cuda").cumsum(0).int()
    heads, heads_kv, head_dim = 8, 2, 128
    q = _random(sum(lengths_q), heads, head_dim)
    k, v = (_random(sum(lengths_k), heads_kv, head_dim) for _ in range(2))
    out, lse = api.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal,
                                          return_lse=True, strict=True)
    assert out.shape == q.shape and lse.shape == (heads, q.shape[0])
    _check_varlen(out, lse, q, k, v, cu_q, cu_k, causal)


@needs_torch
def test_torch_packed_entry_points_name_a_misshapen_tensor():
    api = _api()
    with pytest.raises(ValueError, match=r"qkv must be 5-D \[batch, seqlen, 3, heads, head_dim\] with 3 at dim -3"):
        api.flash_attn_qkvpacked_func(torch.zeros(1, 4, 2, 2, 64))
    with pytest.raises(ValueError, match=r"kv must be 4-D \[total_k, 2, heads_kv, head_dim\]"):
        api.flash_attn_varlen_kvpacked_func(torch.zeros(4, 2, 64), torch.zeros(4, 2, 64), None, None, 4, 4)


@needs_cuda
def test_torch_packed_entry_points_read_their_slices_in_place():
    """FlashAttention's qkv- and kv-packed functions equal the unpacked ones, on the kernels."""
    api = _api()
    torch.manual_seed(9)
    qkv = _random(2, 77, 3, 4, 64)
    q, k, v = qkv.unbind(2)
    expected = api.flash_attn_func(q, k, v, causal=True, strict=True)
    assert torch.equal(api.flash_attn_qkvpacked_func(qkv, causal=True, strict=True), expected)
    assert torch.equal(api.flash_attn_kvpacked_func(q, torch.stack([k, v], 2), causal=True, strict=True), expected)
    lengths = [5, 1, 40]
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    tokens = _random(sum(lengths), 3, 8, 128)
    expected = api.flash_attn_varlen_func(*tokens.unbind(1), cu, cu, 40, 40, window_size=(8, 2), strict=True)
    assert torch.equal(api.flash_attn_varlen_qkvpacked_func(tokens, cu, 40, window_size=(8, 2), strict=True), expected)
    assert torch.equal(api.flash_attn_varlen_kvpacked_func(tokens[:, 0], tokens[:, 1:], cu, cu, 40, 40,
                                                           window_size=(8, 2), strict=True), expected)


@needs_cuda
@pytest.mark.parametrize("causal, head_dim, heads_kv", [(False, 64, 4), (True, 128, 1), (True, 256, 2)])
def test_torch_varlen_reads_skewed_packed_tokens_in_place(causal, head_dim, heads_kv):
    """One long prompt among short, 1-token and empty ones: served by the kernels on the packed
    tokens themselves (no padded copy: the call allocates its output and LSE only)."""
    api = _api()
    torch.manual_seed(4)
    lengths_q, lengths_k = [3, 0, 1, 1000, 17, 129, 1], [40, 5, 1, 1000, 17, 300, 64]
    cu_q = torch.tensor([0] + lengths_q, device="cuda").cumsum(0).int()
    cu_k = torch.tensor([0] + lengths_k, device="cuda").cumsum(0).int()
    heads = 8
    q = _random(sum(lengths_q), heads, head_dim)
    k, v = (_random(sum(lengths_k), heads_kv, head_dim) for _ in range(2))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, lse = api.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal,
                                          return_lse=True, strict=True)
    allocated = torch.cuda.max_memory_allocated() - before
    assert allocated <= out.numel() * out.element_size() + lse.numel() * 4 + (1 << 20), allocated
    _check_varlen(out, lse, q, k, v, cu_q, cu_k, causal)


@needs_cuda
@pytest.mark.parametrize("seqlen_q, causal", [(1, False), (2, True)])
def test_torch_kvcache_per_sequence_lengths(seqlen_q, causal):
    api = _api()
    torch.manual_seed(3)
    batch, capacity, heads, heads_kv, head_dim = 3, 256, 16, 4, 128
    k_cache, v_cache = (_random(batch, capacity, heads_kv, head_dim) for _ in range(2))
    filled = torch.tensor([10, 200, 256 - seqlen_q], dtype=torch.int32, device="cuda")
    q = _random(batch, seqlen_q, heads, head_dim)
    k_new, v_new = (_random(batch, seqlen_q, heads_kv, head_dim) for _ in range(2))
    k_before = k_cache.clone()
    out, lse = api.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=filled, causal=causal,
                                           return_softmax_lse=True, strict=True)
    lengths = (filled + seqlen_q).tolist()
    for b, start in enumerate(filled.tolist()):  # written in place after each sequence's tokens
        assert torch.equal(k_cache[b, start:start + seqlen_q], k_new[b])
        assert torch.equal(k_cache[b, :start], k_before[b, :start])
    reference, reference_lse = _reference(q, k_cache, v_cache, causal, seqlens_kv=lengths)
    pytorch, _ = _reference(q, k_cache, v_cache, causal, seqlens_kv=lengths, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)
    # One length for all: the cache is sliced, no per-sequence lengths.
    out_int = api.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=100, causal=causal, strict=True)
    reference, _ = _reference(q, k_cache[:, :100], v_cache[:, :100], causal)
    pytorch, _ = _reference(q, k_cache[:, :100], v_cache[:, :100], causal, dtype=q.dtype)
    _assert_flash_rule(out_int, reference, pytorch, "cache_seqlens=100")


@needs_cuda
def test_torch_module_calls_flash_attn_func():
    api = _api()
    q, k, v = (_random(2, 64, 8, 64) for _ in range(3))
    module = api.FlashAttention(softmax_scale=0.1, attention_dropout=0.2).eval()
    assert torch.equal(module(q, k, v, causal=True), api.flash_attn_func(q, k, v, softmax_scale=0.1, causal=True))
    torch.manual_seed(5)  # training: the kernels' dropout, from PyTorch's generator (tests/python/test_dropout.py)
    trained = module.train()(q, k, v)
    torch.manual_seed(5)
    assert torch.equal(trained, api.flash_attn_func(q, k, v, dropout_p=0.2, softmax_scale=0.1, strict=True))


@needs_cuda
def test_torch_autograd_matches_fp64():
    api = _api()
    torch.manual_seed(4)
    q = _random(2, 33, 8, 64).requires_grad_()
    k, v = (_random(2, 70, 2, 64).requires_grad_() for _ in range(2))
    grad = _random(2, 33, 8, 64)
    out = api.flash_attn_func(q, k, v, causal=True)
    ours = torch.autograd.grad(out, (q, k, v), grad)
    for dtype, name in ((torch.float64, "reference"), (torch.float16, "pytorch")):
        inputs = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        result, _ = _reference(*inputs, causal=True, dtype=dtype)
        grads = torch.autograd.grad(result, inputs, grad.to(dtype))
        if name == "reference":
            reference = grads
        else:
            for what, g, r, p in zip(("dq", "dk", "dv"), ours, reference, grads):
                _assert_flash_rule(g, r, p, what)


@needs_cuda
def test_torch_compile_fullgraph():
    api = _api()
    torch.manual_seed(5)
    q = _random(2, 16, 8, 128)
    k, v = (_random(2, 300, 2, 128) for _ in range(2))

    def layer(q, k, v):
        return api.flash_attn_func(q, k, v, causal=True) * 2

    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(q, k, v), layer(q, k, v))
    # Gradients through the compiled graph equal eager ones (the same backward math).
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    eager = torch.autograd.grad(layer(*leaves).float().sum(), leaves)
    traced = torch.autograd.grad(compiled(*leaves).float().sum(), leaves)
    for e, t in zip(eager, traced):
        torch.testing.assert_close(t, e, atol=2e-2, rtol=2e-2)
    # The KV-cache step, cache written in place inside the graph.
    k_cache, v_cache = (_random(2, 64, 2, 128) for _ in range(2))
    lengths = torch.tensor([5, 40], dtype=torch.int32, device="cuda")
    step = torch.compile(api.flash_attn_with_kvcache, fullgraph=True)
    caches = (k_cache.clone(), v_cache.clone())
    expected = api.flash_attn_with_kvcache(q[:, :1], k_cache, v_cache, k[:, :1], v[:, :1], cache_seqlens=lengths)
    got = step(q[:, :1], caches[0], caches[1], k[:, :1], v[:, :1], cache_seqlens=lengths)
    assert torch.equal(got, expected) and torch.equal(caches[0], k_cache)


def _capture(function):
    """A CUDA graph of function(), warmed up on a side stream first as PyTorch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            function()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = function()
    return graph, out


@needs_cuda
def test_torch_cuda_graph_capture_and_replay():
    api = _api()
    torch.manual_seed(6)
    # A prefill call, and a decode step of few long sequences (split keys: workspace from the pool).
    q, k, v = _random(2, 128, 8, 64), _random(2, 128, 8, 64), _random(2, 128, 8, 64)
    q_step, k_cache, v_cache = _random(1, 1, 8, 128), _random(1, 8192, 2, 128), _random(1, 8192, 2, 128)
    lengths = torch.tensor([3000], dtype=torch.int32, device="cuda")
    graph, (out, out_step) = _capture(lambda: (
        api.flash_attn_func(q, k, v, causal=True),
        api.flash_attn_with_kvcache(q_step, k_cache, v_cache, cache_seqlens=lengths)))
    for new_length in (3000, 8000, 17):
        for t in (q, k, v, q_step):
            t.copy_(torch.randn_like(t))
        lengths.fill_(new_length)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, api.flash_attn_func(q, k, v, causal=True))
        assert torch.equal(out_step, api.flash_attn_with_kvcache(q_step, k_cache, v_cache, cache_seqlens=lengths))


@needs_cuda
def test_torch_fallback_warns_once_and_strict_mode_raises(monkeypatch):
    api = _api()
    q, k, v = (_random(2, 16, 4, 264) for _ in range(3))
    choice = api.which_backend(q, k, v)
    assert choice.backend == "sdpa" and "head_dim 264" in choice.reason
    _backends._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = api.flash_attn_func(q, k, v)
        api.flash_attn_func(q, k, v)
    fallbacks = [w for w in caught if issubclass(w.category, api.FallbackWarning)]
    assert len(fallbacks) == 1 and "head_dim 264" in str(fallbacks[0].message)
    reference, _ = _reference(q, k, v)
    pytorch, _ = _reference(q, k, v, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    with pytest.raises(api.UnsupportedError, match="head_dim 264"):
        api.flash_attn_func(q, k, v, strict=True)
    monkeypatch.setenv("FMHA_STRICT", "1")
    with pytest.raises(api.UnsupportedError, match="strict mode"):
        api.flash_attn_func(q, k, v)
    monkeypatch.setenv("FMHA_STRICT", "0")
    api.flash_attn_func(q, k, v)


@needs_cuda
def test_torch_backward_without_a_kernel_warns_once_and_strict_mode_raises(monkeypatch):
    """Where no backward kernel serves a call, PyTorch's recompute gives the gradients: said once per
    reason by a FallbackWarning, as the forward's fallbacks are; FMHA_STRICT=1 raises instead."""
    api = _api()
    from fmha import _backward, _library

    def refuse(self, problem, device):
        raise _library.LibraryError(_library.NO_KERNEL, "no backward kernel (the test refuses them)")

    monkeypatch.setattr(_library.Library, "plan_backward", refuse)
    monkeypatch.setattr(_backward, "_plans", {})
    _backends._warned.clear()
    q, k, v = (_random(2, 70, 4, 64).requires_grad_() for _ in range(3))
    grad = torch.randn_like(q)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            dq, dk, dv = torch.autograd.grad(api.flash_attn_func(q, k, v, causal=True), (q, k, v), grad)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, api.FallbackWarning)]
    assert fallbacks == ["fmha: recomputing the backward in PyTorch: no backward kernel (the test refuses them)"]
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))
    monkeypatch.setenv("FMHA_STRICT", "1")
    with pytest.raises(api.UnsupportedError, match="the test refuses them"):
        torch.autograd.grad(api.flash_attn_func(q, k, v, causal=True), (q, k, v), grad)


@needs_cuda
@pytest.mark.parametrize("case, reason", [
    ("float32", "dtype torch.float32"),
    ("misaligned", "not multiples of 16 bytes"),
])
def test_torch_fallback_reasons(case, reason):
    api = _api()
    q, k, v = (_random(1, 32, 4, 64) for _ in range(3))
    options = {}
    if case == "float32":
        q, k, v = q.float(), k.float(), v.float()
    else:
        q = _random(1 * 32 * 4 * 64 + 4).narrow(0, 4, 32 * 4 * 64).view(1, 32, 4, 64)  # 8 bytes off
    choice = api.which_backend(q, k, v, **options)
    assert choice.backend == "sdpa" and reason in choice.reason, choice
    _backends._warned.clear()
    with pytest.warns(api.FallbackWarning, match=reason.replace("(", r"\(").replace(")", r"\)")):
        out = api.flash_attn_func(q, k, v, **options)
    left, right = options.get("window_size", (-1, -1))
    reference, _ = _reference(q, k, v, window=(left, right))
    pytorch, _ = _reference(q, k, v, window=(left, right), dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)


@needs_cuda
def test_torch_repeated_calls_check_what_can_change():
    """A call like an earlier one reuses its launch (fmha._fastpath): new data gives new results,
    and what the key does not hold (pointers, autograd, argument types) is still checked."""
    api = _api()
    q, k, v = _random(2, 40, 8, 64), _random(2, 70, 2, 64), _random(2, 70, 2, 64)
    first = _check_call(q, k, v, causal=True)
    for _ in range(2):  # the second call and on take the kept launch
        q2, k2, v2 = _random(2, 40, 8, 64), _random(2, 70, 2, 64), _random(2, 70, 2, 64)
        out = api.flash_attn_func(q2, k2, v2, causal=True)
        reference, _ = _reference(q2, k2, v2, causal=True)
        pytorch, _ = _reference(q2, k2, v2, causal=True, dtype=q.dtype)
        _assert_flash_rule(out, reference, pytorch)
    assert torch.equal(api.flash_attn_func(q, k, v, causal=True), first)
    # Same shape and strides, 8 bytes off: falls back, correctly.
    q_off = _random(q.numel() + 4).narrow(0, 4, q.numel()).view(q.shape)
    _backends._warned.clear()
    with pytest.warns(api.FallbackWarning, match="not multiples of 16 bytes"):
        out = api.flash_attn_func(q_off, k, v, causal=True)
    _assert_flash_rule(out, _reference(q_off, k, v, causal=True)[0], _reference(q_off, k, v, True, dtype=q.dtype)[0])
    # Values equal to accepted ones but of a type the checks refuse still raise.
    with pytest.raises(ValueError, match="dropout_p"):
        api.flash_attn_func(q, k, v, dropout_p=False, causal=True)
    with pytest.raises(TypeError, match="softmax_scale"):
        api.flash_attn_func(q, k, v, softmax_scale=True, causal=True)
    api.flash_attn_func(q, k, v, softmax_scale=1.0, causal=True)
    with pytest.raises(TypeError, match="softmax_scale"):
        api.flash_attn_func(q, k, v, softmax_scale=True, causal=True)
    # Inputs that need gradients get them (the operator path), after the launch was kept.
    qg = q.detach().clone().requires_grad_()
    api.flash_attn_func(qg, k, v, causal=True).float().sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()
    # The KV-cache function: per-sequence lengths changed in place between calls are read.
    k_cache, v_cache = _random(2, 96, 2, 64), _random(2, 96, 2, 64)
    lengths = torch.tensor([70, 33], dtype=torch.int32, device="cuda")
    q1 = _random(2, 1, 8, 64)
    for filled in ([70, 33], [12, 96]):
        lengths.copy_(torch.tensor(filled, dtype=torch.int32))
        out = api.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens=lengths)
        reference, _ = _reference(q1, k_cache, v_cache, seqlens_kv=lengths)
        pytorch, _ = _reference(q1, k_cache, v_cache, seqlens_kv=lengths, dtype=q1.dtype)
        _assert_flash_rule(out, reference, pytorch)
    from fmha import _fastpath

    def kept(stride):  # whether a KV-cache call with lengths of this stride was kept
        return any(key[0] == "flash_attn_with_kvcache" and isinstance(key[4], tuple) and key[4][1] == (stride,)
                   for key in _fastpath._launches)
    assert kept(1)
    # Lengths that are not contiguous (every other entry of a tensor): the kept launch passes the
    # lengths as they are, so such calls are never kept and each reads its lengths right.
    spread = torch.tensor([70, 5, 33, 7], dtype=torch.int32, device="cuda")
    for filled in ([70, 33], [12, 96], [96, 1]):
        spread[::2].copy_(torch.tensor(filled, dtype=torch.int32))
        out = api.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens=spread[::2])
        reference, _ = _reference(q1, k_cache, v_cache, seqlens_kv=spread[::2].contiguous())
        pytorch, _ = _reference(q1, k_cache, v_cache, seqlens_kv=spread[::2].contiguous(), dtype=q1.dtype)
        _assert_flash_rule(out, reference, pytorch, f"lengths {filled} of stride 2")
    assert not kept(2)



@needs_cuda
def test_torch_repeated_packed_calls_read_new_tokens_and_lengths():
    """A packed call like an earlier one reuses its launch: new tokens and new cu_seqlens of the
    same shape give their own results, and bad values in a new cu_seqlens still raise."""
    api = _api()
    from fmha import _fastpath
    heads, heads_kv, head_dim = 8, 2, 128
    for lengths in ([5, 1, 37, 64], [64, 37, 1, 5], [40, 40, 0, 27]):  # 107 tokens each time
        cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
        q = _random(107, heads, head_dim)
        k, v = (_random(107, heads_kv, head_dim) for _ in range(2))
        out, lse = api.flash_attn_varlen_func(q, k, v, cu, cu, 64, 64, causal=True, return_lse=True, strict=True)
        _check_varlen(out, lse, q, k, v, cu, cu, True)
    assert any(key[0] == "flash_attn_varlen_func" for key in _fastpath._launches)
    bad = torch.tensor([0, 70, 70, 100, 107], dtype=torch.int32, device="cuda")  # a step of 70 > 64
    with pytest.raises(ValueError, match="steps 0 to 70"):
        api.flash_attn_varlen_func(q, k, v, bad, bad, 64, 64, causal=True)

def _decode_calls_by_workspace():
    """Decode steps (q, k, v) whose launches need a workspace (split keys), smallest first, and
    those sizes in bytes: at least two different ones."""
    from fmha import _catalogue
    calls = []
    for heads, heads_kv, seqlen_q, head_dim, keys in ((8, 2, 1, 64, 8192), (8, 2, 1, 128, 8192), (8, 2, 2, 128, 8192),
                                                      (8, 8, 1, 256, 8192), (32, 8, 1, 128, 16384)):
        q = _random(1, seqlen_q, heads, head_dim)
        k, v = _random(1, keys, heads_kv, head_dim), _random(1, keys, heads_kv, head_dim)
        launch, _ = _catalogue.prepare(q, k, v, None, head_dim ** -0.5, -1, -1, 0.0)
        if launch is not None and launch[0].workspace_bytes:
            calls.append((launch[0].workspace_bytes, (q, k, v)))
    calls.sort(key=lambda call: call[0])
    assert len({size for size, _ in calls}) >= 2, f"workspace sizes {[size for size, _ in calls]}"
    return [call for _, call in calls], [size for size, _ in calls]


@needs_cuda
def test_torch_kept_workspace_grows_and_is_per_stream_and_thread():
    """Kept launches reuse one workspace per thread and stream (fmha._catalogue._workspace): a
    larger call grows it and a smaller one after reuses it; calls on two streams at once, and on
    two threads, each get their own. Every result equals the full path's (a fresh workspace)."""
    api = _api()
    from fmha import _catalogue
    torch.manual_seed(9)
    calls, sizes = _decode_calls_by_workspace()
    small, large = 0, len(calls) - 1
    expected = [api.flash_attn_func(*call) for call in calls]  # the full path: a workspace per call
    _catalogue._workspaces.clear()
    here = (torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream, threading.get_ident())
    for i, kept_bytes in ((small, sizes[small]), (large, sizes[large]), (small, sizes[large])):
        assert torch.equal(api.flash_attn_func(*calls[i]), expected[i])
        assert _catalogue._workspaces[here][0] == kept_bytes
    # Two streams at once, each alternating a large and a small call: one workspace would be
    # written by both streams' kernels together.
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    assert streams[0].cuda_stream != streams[1].cuda_stream
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    outs = []
    for round in range(20):
        for stream, i in zip(streams, ((small, large) if round % 2 else (large, small))):
            with torch.cuda.stream(stream):
                outs.append((i, api.flash_attn_func(*calls[i])))
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert all(torch.equal(out, expected[i]) for i, out in outs)
    pointers = {key[1]: pointer for key, (_, _, pointer) in _catalogue._workspaces.items()}
    assert len({pointers[stream.cuda_stream] for stream in streams} | {pointers[here[1]]}) == 3
    # Two threads on one stream: a thread's launch pair (partials, then their combine) can
    # interleave with the other's, so each thread has its own workspace.
    theirs = []
    worker = threading.Thread(target=lambda: theirs.extend(api.flash_attn_func(*calls[large]) for _ in range(20)))
    worker.start()
    mine = [api.flash_attn_func(*calls[large]) for _ in range(20)]
    worker.join()
    torch.cuda.synchronize()
    assert len(theirs) == 20 and all(torch.equal(out, expected[large]) for out in theirs + mine)
    assert len({key[2] for key in _catalogue._workspaces if key[1] == here[1]}) == 2


@needs_cuda
def test_torch_captured_call_takes_the_graph_s_workspace():
    """A call captured into a CUDA graph takes its workspace from the graph's pool, never the
    kept one: after the stream's kept workspace grows (and lets go of the smaller one, whose
    memory then serves new tensors), replays stay right and write into none of those tensors;
    eager calls between replays stay right too."""
    api = _api()
    from fmha import _catalogue
    torch.manual_seed(10)
    calls, sizes = _decode_calls_by_workspace()
    (q, k, v), big = calls[0], calls[-1]
    _catalogue._workspaces.clear()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # the full path, then kept launches: this stream's kept workspace
            expected = api.flash_attn_func(q, k, v)
        kept = _catalogue._workspaces[(torch.cuda.current_device(), stream.cuda_stream, threading.get_ident())]
        assert kept[0] == sizes[0]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = api.flash_attn_func(q, k, v)
        for _ in range(2):
            api.flash_attn_func(*big)  # grows the kept workspace: the smaller one is let go
        del kept
        canaries = [torch.full((sizes[0],), 0x5A, dtype=torch.uint8, device="cuda") for _ in range(4)]
    torch.cuda.current_stream().wait_stream(stream)
    inputs = (q.clone(), k.clone(), v.clone())
    for round in range(3):
        q.copy_(torch.randn_like(q))
        graph.replay()
        eager = api.flash_attn_func(*inputs)  # between replays, on the replays' stream
        torch.cuda.synchronize()
        assert torch.equal(out, api.flash_attn_func(q, k, v)) and torch.equal(eager, expected)
    assert all(bool((canary == 0x5A).all()) for canary in canaries)


@needs_cuda
def test_torch_which_backend_names_the_kernel():
    api = _api()
    q, k, v = _random(8, 1, 32, 128), _random(8, 512, 8, 128), _random(8, 512, 8, 128)
    choice = api.which_backend(q, k, v)
    assert choice.backend == "fmha" and choice.kernel.startswith("fmha_fwd_fp16_d128_gqa_nomask_decode_")
    assert "decode family" in choice.reason and choice.kernel in repr(choice)


@needs_cuda
@pytest.mark.parametrize("args", [
    ["-b", "64", "-h", "32", "-s", "2", "-s-q", "1", "-d", "256"],         # config 3, smaller batch
    ["-b", "2", "-h", "8", "-gqa", "2", "-s", "333", "-d", "64", "-causal-mask"],
], ids=["decode", "prefill"])
def test_torch_results_equal_fmha_exe(args, tmp_path):
    """The same kernel on the same inputs from fmha.exe and from Python: the same bits."""
    api = _api()
    saved = tmp_path / "tensors"
    run = subprocess.run([str(_BIN / "fmha.exe"), *args, "-runs", "1", "-warm-up-runs", "0", "-save-tensors",
                          str(saved)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    import numpy
    meta = json.loads((saved / "meta.json").read_text())
    q, k, v, o = (torch.from_numpy(numpy.load(saved / f"{name}.npy")).cuda().transpose(1, 2)
                  for name in ("q", "k", "v", "o"))  # [b, h, s, d] files, read as [b, s, h, d] views
    window = (meta["window_left"], meta["window_right"])
    choice = api.which_backend(q, k, v, window_size=window)
    assert choice.kernel == meta["kernel"], choice
    out = api.flash_attn_func(q, k, v, window_size=window, strict=True)
    assert torch.equal(out, o), f"max difference {(out.float() - o.float()).abs().max().item()}"


# ---------------------------------------------------------------- the backward kernels

def _check_gradients(q, k, v, causal=False, window=(-1, -1), with_lse=False, seed=0, deterministic=False,
                     lse_only=False, softcap=0.0, alibi=None):
    """dq, dk, dv of flash_attn_func, served by a backward kernel, against fp64 by FlashAttention's
    rule (PyTorch's own error: the same attention in q's dtype). lse_only: only the LSE is
    differentiated (the output's gradient is None), so dv is zero. softcap, alibi (slopes):
    FlashAttention's options, in the call and the references."""
    api = _api()
    from fmha import _backward
    scale = 1.0 / math.sqrt(q.shape[-1])
    left, right = window[0], 0 if causal else window[1]
    kernel = _backward.kernel_name(q, k, scale, left, right, deterministic=deterministic, softcap=softcap,
                                   alibi_slopes=alibi)
    assert kernel is not None and kernel.startswith("fmha_bwd_"), "no backward kernel serves the call"
    generator = torch.Generator(device="cuda").manual_seed(seed)
    grad = torch.randn(q.shape, dtype=q.dtype, device="cuda", generator=generator)
    grad_lse = torch.randn(q.shape[0], q.shape[2], q.shape[1], device="cuda", generator=generator)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse = api.flash_attn_func(*leaves, causal=causal, window_size=window, return_lse=True, strict=True,
                                   deterministic=deterministic, softcap=softcap, alibi_slopes=alibi)
    outputs, grads_out = ((out,), (grad,))
    if with_lse or lse_only:
        outputs, grads_out = ((lse,), (grad_lse,)) if lse_only else ((out, lse), (grad, grad_lse))
    ours = torch.autograd.grad(outputs, leaves, grads_out)
    if lse_only:
        assert torch.count_nonzero(ours[2]) == 0, "dv of the LSE alone"
    for dtype in (torch.float64, q.dtype):
        inputs = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        result, result_lse = _reference(*inputs, causal=causal, window=window, dtype=dtype, softcap=softcap, alibi=alibi)
        if lse_only:  # (the LSE does not depend on v: dq and dk only)
            grads = torch.autograd.grad(result_lse, inputs[:2], grad_lse.double())
        elif with_lse:  # _reference's LSE is fp64 of the inputs in `dtype`, differentiable
            grads = torch.autograd.grad((result, result_lse), inputs, (grad.to(dtype), grad_lse.double()))
        else:
            grads = torch.autograd.grad(result, inputs, grad.to(dtype))
        if dtype == torch.float64:
            reference = grads
        else:
            for what, g, r, p in zip(("dq", "dk", "dv"), ours, reference, grads):
                assert g.shape == r.shape
                _assert_flash_rule(g, r, p, f"{kernel} {what}")


@needs_cuda
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal", [
    (2, 33, 70, 8, 2, 64, True),       # GQA, bottom-right causal, odd lengths
    (1, 129, 129, 4, 4, 64, False),    # MHA, a partial last tile
    (2, 97, 200, 6, 1, 128, True),     # MQA
    (1, 250, 77, 4, 2, 128, False),    # more queries than keys
    (3, 64, 64, 2, 2, 128, True),
    (2, 77, 150, 4, 2, 256, True),     # d256: the warpgroups split dK's and dV's columns
    (1, 130, 65, 2, 2, 256, False),
    (9, 100, 300, 10, 5, 128, False),  # 45 (KV head, sequence) pairs of 3 key tiles: two block groups, the last of 2
    # Smaller head_dims on the next larger kernel (columns past them zero-filled, never written).
    (2, 50, 130, 4, 2, 40, True),
    (2, 77, 150, 4, 2, 80, True),
    (1, 100, 90, 4, 4, 96, False),
    (1, 60, 120, 6, 2, 192, True),
    # head_dims that are not multiples of 8: the kernels take them with zero columns added.
    (2, 70, 90, 4, 2, 59, True),
    (1, 50, 77, 4, 4, 111, False),
])
def test_torch_backward_kernel_matches_fp64(dtype, batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal):
    torch.manual_seed(31)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q = _random(batch, seqlen_q, heads, head_dim, dtype=dt)
    k, v = (_random(batch, seqlen_kv, heads_kv, head_dim, dtype=dt) for _ in range(2))
    _check_gradients(q, k, v, causal=causal)


@needs_cuda
@pytest.mark.parametrize("head_dim", [64, 128, 80])
def test_torch_bf16_softcap_rows_that_see_one_key_return_its_value(head_dim):
    """bf16 softcapped launches keep no running maximum (docs/decisions.md, "Softcapped scores
    without a running maximum"), so no probability is exactly 1: a row that sees a single key must
    still return that key's value exactly, as FlashAttention's does (its tests' rule allows no
    error where PyTorch's bf16 reference has none)."""
    api = _api()
    q, k, v = _random(2, 300, 8, head_dim, dtype=torch.bfloat16), *(_random(2, 300, 2, head_dim, dtype=torch.bfloat16)
                                                                     for _ in range(2))
    group = lambda t: t.repeat_interleave(4, dim=-2)  # KV heads to query heads
    out = api.flash_attn_func(q, k, v, causal=True, softcap=30.0, strict=True)
    assert torch.equal(out[:, 0], group(v[:, 0])), "the first causal row sees key 0 only"
    out = api.flash_attn_func(q, k, v, window_size=(0, 0), softcap=30.0, strict=True)
    assert torch.equal(out, group(v)), "a window of (0, 0): every row sees its own key only"
    lengths = [1, 57, 1, 300, 1]
    starts = [sum(lengths[:b]) for b in range(len(lengths) + 1)]
    cu = torch.tensor(starts, dtype=torch.int32, device="cuda")
    q, k, v = (t.flatten(0, 1)[:starts[-1]].contiguous() for t in (q, k, v))
    out = api.flash_attn_varlen_func(q, k, v, cu, cu, 300, 300, softcap=30.0, strict=True)
    for b in (0, 2, 4):
        assert torch.equal(out[starts[b]], group(v[starts[b]])), f"sequence {b} holds one key"


@needs_cuda
@pytest.mark.parametrize("options", ["softcap", "alibi", "both"])
@pytest.mark.parametrize("dtype, batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal, window", [
    ("bf16", 2, 77, 150, 8, 2, 64, True, (-1, -1)),      # GQA, bottom-right causal
    ("fp16", 1, 129, 200, 4, 4, 128, False, (-1, -1)),   # no mask: ALiBi's distance both ways
    ("fp16", 2, 100, 100, 4, 1, 128, True, (30, 0)),     # MQA, a window
    ("bf16", 2, 90, 333, 4, 2, 256, True, (-1, -1)),     # d256 (Gemma-2's head_dim with softcapping)
])
def test_torch_backward_kernel_takes_softcap_and_alibi(monkeypatch, options, dtype, batch, seqlen_q, seqlen_kv, heads,
                                                       heads_kv, head_dim, causal, window):
    """Softcapping (dS times 1 - tanh^2) and ALiBi (the same slopes for every sequence, and a row
    per sequence) in the backward kernels, no recompute (which raises here), of out and the LSE."""
    from fmha import _math
    monkeypatch.setattr(_math, "attention_backward", _no_recompute)
    torch.manual_seed(36)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q = _random(batch, seqlen_q, heads, head_dim, dtype=dt)
    k, v = (_random(batch, seqlen_kv, heads_kv, head_dim, dtype=dt) for _ in range(2))
    softcap = 4.0 if options != "alibi" else 0.0  # near the scores' size: tanh bends them
    alibi = None if options == "softcap" else _slopes(heads, "cuda", batch if options == "both" else None)
    _check_gradients(q, k, v, causal=causal, window=window, with_lse=True, softcap=softcap, alibi=alibi)


@needs_cuda
@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, False), (256, True)])
def test_deterministic_backward_repeats_bitwise(head_dim, causal):
    """deterministic=True: the backward kernels add dQ's partial sums in the key tiles' order, so
    two calls on equal inputs give equal bits (8 key tiles add into each query tile here), and
    the gradients keep FlashAttention's error rule."""
    api = _api()
    from fmha import _backward
    torch.manual_seed(33)
    q = _random(2, 300, 8, head_dim)
    k, v = (_random(2, 1000, 2, head_dim) for _ in range(2))
    if _backward.kernel_name(q, k, 1.0, -1, 0 if causal else -1, deterministic=True) is None:
        pytest.skip("this build's backward kernels have no deterministic loop (setup.py --no-deterministic-backward)")
    _check_gradients(q, k, v, causal=causal, deterministic=True)
    grad = torch.randn_like(q)
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = api.flash_attn_func(*leaves, causal=causal, deterministic=True, strict=True)
        runs.append(torch.autograd.grad(out, leaves, grad))
    for name, first, second in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(first, second), f"{name} differs between two deterministic calls"
    # packed sequences too, through the varlen operator
    cu = torch.tensor([0, 300, 600], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 1000, 2000], dtype=torch.int32, device="cuda")
    runs = []
    for _ in range(2):
        leaves = [t.detach().reshape(-1, *t.shape[2:]).clone().requires_grad_() for t in (q, k, v)]
        out = api.flash_attn_varlen_func(*leaves, cu, cu_k, 300, 1000, causal=causal, deterministic=True, strict=True)
        runs.append(torch.autograd.grad(out, leaves, grad.reshape(out.shape)))
    for name, first, second in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(first, second), f"packed {name} differs between two deterministic calls"


@needs_cuda
def test_deterministic_without_its_loop_warns_and_recomputes():
    """A build without the deterministic loop (the default catalogue): deterministic=True warns
    once, naming the generator flag, and the PyTorch recompute gives equal gradients twice."""
    api = _api()
    from fmha import _backward, backends
    backends._warned.discard(_backward._NO_DETERMINISTIC_LOOP)  # (once per process and reason)
    torch.manual_seed(34)
    q, k, v = (_random(1, 200, 4, 64) for _ in range(3))
    if _backward.kernel_name(q, k, 0.125, -1, 0) is None:
        pytest.skip("no backward kernel serves the shape in this build")
    if _backward.kernel_name(q, k, 0.125, -1, 0, deterministic=True) is not None:
        pytest.skip("this build has the deterministic loop (setup.py --no-deterministic-backward leaves it out)")
    grad = torch.randn_like(q)
    runs = []
    for _ in range(2):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = api.flash_attn_func(*leaves, causal=True, deterministic=True)
            runs.append(torch.autograd.grad(out, leaves, grad))
        if not runs[1:]:  # the first call warns (then once per reason)
            assert any("--deterministic-backward" in str(w.message) for w in caught
                       if issubclass(w.category, api.FallbackWarning)), [str(w.message) for w in caught]
    for name, first, second in zip(("dq", "dk", "dv"), *runs):
        assert torch.equal(first, second), f"{name} differs between two deterministic calls"


@needs_cuda
def test_deterministic_takes_only_a_flag():
    api = _api()
    q, k, v = (_random(1, 40, 4, 64) for _ in range(3))
    with pytest.raises(ValueError, match="deterministic must be True or False"):
        api.flash_attn_func(q, k, v, deterministic="yes")


@needs_cuda
def test_torch_second_derivative_raises():
    """The backward kernels' gradients have no gradient of their own: differentiating them again
    raises (fmha._eager's backward is once_differentiable) rather than giving zeros."""
    api = _api()
    q, k, v = (_random(1, 64, 2, 64).requires_grad_() for _ in range(3))
    out = api.flash_attn_func(q, k, v, causal=True, strict=True)
    dq, = torch.autograd.grad((out.float() ** 2).sum(), q, create_graph=True)  # (a gradient that depends on q)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(dq.sum(), q)


@needs_cuda
def test_torch_backward_kernel_sliding_window_and_lse_gradient():
    torch.manual_seed(32)
    q = _random(2, 90, 4, 64)
    k, v = (_random(2, 150, 2, 64) for _ in range(2))
    _check_gradients(q, k, v, causal=True, window=(40, 0))
    _check_gradients(q, k, v, causal=True, with_lse=True, seed=1)
    _check_gradients(q, k, v, causal=True, lse_only=True, seed=5)
    _check_gradients(q, k, v, window=(20, 7), seed=2)   # two-sided: a key block's rows on both sides
    _check_gradients(q, k, v, window=(-1, 3), seed=3)
    q = _random(2, 150, 4, 64)  # more queries than keys, causal: the first rows see none
    _check_gradients(q, k[:, :77], v[:, :77], causal=True, seed=4)


@needs_cuda
def test_torch_backward_operator_passes_opcheck():
    """fmha::attention_backward's schema and fake implementation agree with what it returns."""
    api = _api()
    from fmha import _ops
    torch.manual_seed(33)
    q = _random(1, 40, 4, 64)
    k, v = (_random(1, 50, 2, 64) for _ in range(2))
    out, lse = api.flash_attn_func(q, k, v, causal=True, return_lse=True)
    args = (torch.randn_like(out), None, q, k, v, out, lse, None, None, 0.125, -1, 0)
    torch.library.opcheck(_ops.attention_backward_op, args, test_utils=("test_schema", "test_faketensor"))


def _no_recompute(*args, **kwargs):
    raise AssertionError("the backward recomputed in PyTorch: no backward kernel served the call")


def _packed(lengths_q, lengths_k, heads, heads_kv, head_dim, dtype):
    """Random packed q [sum(lengths_q), heads, d], k, v and their int32 cu_seqlens."""
    cu_q, cu_k = (torch.tensor([0] + lengths, device="cuda").cumsum(0).int() for lengths in (lengths_q, lengths_k))
    q = _random(sum(lengths_q), heads, head_dim, dtype=dtype)
    k, v = (_random(sum(lengths_k), heads_kv, head_dim, dtype=dtype) for _ in range(2))
    return q, k, v, cu_q, cu_k


@needs_cuda
@pytest.mark.parametrize("lengths_q, lengths_k, heads, heads_kv, head_dim, causal, window, dtype, softcap, alibi", [
    ([5, 0, 37, 64, 130], [17, 3, 64, 90, 129], 8, 2, 128, True, (-1, -1), "bf16", 0.0, False),  # an empty sequence, GQA
    ([70, 1, 200], [70, 1, 200], 4, 4, 64, False, (-1, -1), "fp16", 0.0, False),                # a 1-token sequence
    ([33, 100, 65], [80, 41, 65], 6, 1, 128, True, (20, 0), "fp16", 0.0, False),                 # MQA, a window
    ([90, 31], [150, 77], 4, 2, 256, True, (-1, -1), "bf16", 0.0, False),                        # d256
    ([40, 1, 77], [90, 5, 60], 8, 2, 128, True, (-1, -1), "bf16", 5.0, True),                    # softcap, ALiBi per sequence
    ([64, 130], [200, 31], 4, 4, 256, False, (-1, -1), "fp16", 6.0, False),                      # d256 softcap
])
def test_torch_varlen_backward_kernel_matches_fp64(monkeypatch, lengths_q, lengths_k, heads, heads_kv, head_dim, causal,
                                                   window, dtype, softcap, alibi):
    """flash_attn_varlen_func's gradients (of out and the LSE) by the packed backward kernel, with
    no padded copy and no recompute (which raises here), each sequence against fp64 by
    FlashAttention's rule; an empty sequence's keys get zero gradients. softcap and alibi
    (a row of slopes per sequence) as FlashAttention takes them."""
    api = _api()
    from fmha import _math
    monkeypatch.setattr(_math, "attention_backward", _no_recompute)
    torch.manual_seed(34)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    q, k, v, cu_q, cu_k = _packed(lengths_q, lengths_k, heads, heads_kv, head_dim, dt)
    grad, grad_lse = torch.randn_like(q), torch.randn(heads, q.shape[0], device="cuda")
    slopes = _slopes(heads, "cuda", len(lengths_q)) if alibi else None
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = api.flash_attn_varlen_func(*leaves, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=causal,
                                          window_size=window, return_lse=True, strict=True, softcap=softcap,
                                          alibi_slopes=slopes)
    ours = torch.autograd.grad((out, lse), leaves, (grad, grad_lse))
    for b in range(len(lengths_q)):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        mine = (ours[0][rows], ours[1][keys], ours[2][keys])
        if rows.start == rows.stop:
            assert all(torch.equal(g, torch.zeros_like(g)) for g in mine[1:]), f"sequence {b}: keys no row sees"
            continue
        results = {}
        for ref_dtype in (torch.float64, dt):
            inputs = [t.detach()[part].unsqueeze(0).to(ref_dtype).requires_grad_()
                      for t, part in ((q, rows), (k, keys), (v, keys))]
            result, result_lse = _reference(*inputs, causal=causal, window=window, dtype=ref_dtype, softcap=softcap,
                                            alibi=slopes[b:b + 1] if alibi else None)
            results[ref_dtype] = torch.autograd.grad((result, result_lse), inputs,
                                                     (grad[rows].unsqueeze(0).to(ref_dtype),
                                                      grad_lse[:, rows].unsqueeze(0).double()))
        for what, g, r, p in zip(("dq", "dk", "dv"), mine, results[torch.float64], results[dt]):
            _assert_flash_rule(g.unsqueeze(0), r, p, f"sequence {b} {what}")


@needs_cuda
def test_torch_varlen_trains_under_compile_and_passes_opcheck():
    """The packed operator under torch.compile(fullgraph=True), forward and backward, equals the
    eager call; its schemas and fake implementations agree with what it returns."""
    api = _api()
    from fmha import _varlen
    torch.manual_seed(35)
    q, k, v, cu_q, cu_k = _packed([40, 7, 99], [60, 7, 120], 4, 2, 64, torch.float16)

    def layer(q, k, v):
        return api.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 99, 120, causal=True) * 2

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    eager_out = layer(*leaves)
    eager = torch.autograd.grad(eager_out.float().sum(), leaves)
    compiled = torch.compile(layer, fullgraph=True)
    traced_out = compiled(*leaves)
    traced = torch.autograd.grad(traced_out.float().sum(), leaves)
    assert torch.equal(traced_out, eager_out)
    for e, t in zip(eager, traced):
        torch.testing.assert_close(t, e, atol=1e-2, rtol=1e-2)
    args = (q, k, v, cu_q, cu_k, 99, 120, 0.125, -1, 0, 0.0, None)
    torch.library.opcheck(_varlen.attention_varlen_op, args, test_utils=("test_schema", "test_faketensor"))
    out, lse = _varlen.attention_varlen_op(*args)
    backward_args = (torch.randn_like(out), None, q, k, v, out, lse, cu_q, cu_k, 99, 120, 0.125, -1, 0)
    torch.library.opcheck(_varlen.attention_varlen_backward_op, backward_args, test_utils=("test_schema", "test_faketensor"))


# ---------------------------------------------------------------- serving options: softcap, ALiBi, paged KV

def _slopes(heads, device, batch=None):
    """Random positive fp32 slopes (never a pattern the kernels could get right by accident)."""
    shape = (heads,) if batch is None else (batch, heads)
    return (torch.rand(*shape, device=device) * 0.5 + 0.01).float()


def _to_pages(cache, page_size, spare=3):
    """A cache [batch, capacity, h, d] as FlashAttention's paged cache, its pages shuffled in the
    pool with spare pages of NaN that no table entry names: (pages [blocks, page_size, h, d],
    block_table int32 [batch, capacity / page_size])."""
    batch, capacity = cache.shape[:2]
    used = batch * capacity // page_size
    where = torch.randperm(used + spare, device=cache.device)[:used]
    pages = torch.full((used + spare, page_size) + tuple(cache.shape[2:]), float("nan"), dtype=cache.dtype,
                       device=cache.device)
    pages[where] = cache.reshape(used, page_size, *cache.shape[2:])
    return pages, where.view(batch, -1).int()


def _from_pages(pages, table):
    """The contiguous cache [batch, capacity, h, d] a paged one stands for."""
    return pages[table.long()].flatten(1, 2)


@needs_torch
def test_torch_serving_options_bad_inputs_raise_naming_the_argument():
    api = _api()
    q, k = torch.randn(2, 3, 4, 64), torch.randn(2, 5, 2, 64)
    cases = [
        ({"softcap": -1.0}, ValueError, "softcap must be a finite float >= 0"),
        ({"softcap": True}, ValueError, "softcap must be a finite float"),
        ({"alibi_slopes": [0.5] * 4}, TypeError, "alibi_slopes must be a torch.Tensor of float32, got list"),
        ({"alibi_slopes": torch.ones(4, dtype=torch.float16)}, TypeError, "alibi_slopes must be float32, got torch.float16"),
        ({"alibi_slopes": torch.ones(3)}, ValueError, "alibi_slopes must be [heads] (4,) or [batch, heads] (2, 4), got shape (3,)"),
        ({"alibi_slopes": torch.ones(4, 2)}, ValueError, "got shape (4, 2)"),
    ]
    for options, error, message in cases:
        with pytest.raises(error) as raised:
            api.flash_attn_func(q, k, k, **options)
        assert message in str(raised.value), raised.value
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"alibi_slopes must be \[heads\]"):
        api.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), k.flatten(0, 1), cu, torch.tensor([0, 5, 10], dtype=torch.int32),
                                   3, 5, alibi_slopes=torch.ones(3, 4))
    pages, table = torch.randn(6, 16, 2, 64), torch.zeros(2, 3, dtype=torch.int32)
    q1 = torch.randn(2, 1, 4, 64)
    table_cases = [
        (table.long(), TypeError, "block_table must be int32, got torch.int64"),
        (table[0], ValueError, "block_table must be 2-D [batch (2), max_blocks_per_seq >= 1], got shape (3,)"),
        (table[:1], ValueError, "got shape (1, 3)"),
        ("table", TypeError, "block_table must be a torch.Tensor of int32, got str"),
    ]
    for bad, error, message in table_cases:
        with pytest.raises(error) as raised:
            api.flash_attn_with_kvcache(q1, pages, pages, block_table=bad)
        assert message in str(raised.value), raised.value
    with pytest.raises(ValueError, match="k_cache must be 4-D"):
        api.flash_attn_with_kvcache(q1, pages[0], pages[0], block_table=table)
    with pytest.raises(ValueError, match="cache_batch_idx cannot be combined with block_table"):
        api.flash_attn_with_kvcache(q1, pages, pages, block_table=table, cache_batch_idx=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"max_seqlen_k \(49\) must be at most what block_table reaches: 3 blocks of 16"):
        api.flash_attn_varlen_func(q1.flatten(0, 1), pages, pages, torch.tensor([0, 1, 2], dtype=torch.int32),
                                   torch.tensor([0, 1, 2], dtype=torch.int32), 1, 49, block_table=table)
    with pytest.raises(ValueError, match=r"cache_batch_idx must index k_cache's 2 rows, got values from 0 to 2"):
        api.flash_attn_with_kvcache(q1, k, k, cache_batch_idx=torch.tensor([0, 2], dtype=torch.int32))


@needs_torch
@pytest.mark.parametrize("paged", [False, True])
def test_torch_kvcache_overflow_raises_and_writes_nothing(paged):
    api = _api()
    torch.manual_seed(7)
    cache = torch.randn(2, 32, 2, 64)
    q, new = torch.randn(2, 2, 4, 64), torch.randn(2, 2, 2, 64)
    table = None
    if paged:
        cache, table = _to_pages(cache, 16, spare=0)
    before = cache.clone()
    for lengths in (torch.tensor([3, 31], dtype=torch.int32), torch.tensor([-1, 3], dtype=torch.int32)):
        with pytest.raises(ValueError, match=r"cache_seqlens \+ new tokens \(2\) must be in \[0, capacity 32\]"):
            api.flash_attn_with_kvcache(q, cache, cache.clone(), new, new, cache_seqlens=lengths, block_table=table)
        assert torch.equal(cache, before), "an overflowing append wrote into the cache"
    with pytest.raises(ValueError, match=r"cache_seqlens \(31\) \+ new tokens \(2\) must be in \[0, capacity 32\]"):
        api.flash_attn_with_kvcache(q, cache, cache.clone(), new, new, cache_seqlens=31, block_table=table)


@needs_torch
def test_torch_kvcache_overflow_where_nothing_can_check_is_reported_next(monkeypatch):
    """Under CUDA-graph capture no check can raise: an overflowing append writes none of that
    sequence's tokens and sets the device's flag, and the next append that can check raises,
    once. Capture is stood in for by turning the host checks off (the PyTorch append's flag ops
    on the CPU; test_torch_kvcache_append_in_a_cuda_graph_refuses_an_overflow has the kernel's)."""
    api = _api()
    from fmha import interface
    torch.manual_seed(16)
    cache_k, cache_v = torch.randn(2, 16, 2, 32), torch.randn(2, 16, 2, 32)
    q, new = torch.randn(2, 1, 4, 32), torch.randn(2, 1, 2, 32)
    fine, overflowing = torch.tensor([3, 4], dtype=torch.int32), torch.tensor([3, 16], dtype=torch.int32)
    api.flash_attn_with_kvcache(q, cache_k, cache_v, new, new, cache_seqlens=fine)  # eager: makes the flag
    monkeypatch.setattr(interface, "_host_checks_allowed", lambda t: False)
    before = cache_k.clone()
    api.flash_attn_with_kvcache(q, cache_k, cache_v, new, new, cache_seqlens=overflowing)  # "captured"
    assert torch.equal(cache_k[1], before[1]), "an overflowing sequence's token was written"
    assert torch.equal(cache_k[0, 3], new[0, 0]), "the sequence that fits was not written"
    monkeypatch.undo()
    with pytest.raises(ValueError, match="an append captured in a CUDA graph .* was refused at a replay: a sequence's "
                                         "cache_seqlens \\+ new tokens passed the cache's capacity"):
        api.flash_attn_with_kvcache(q, cache_k, cache_v, new, new, cache_seqlens=fine)
    api.flash_attn_with_kvcache(q, cache_k, cache_v, new, new, cache_seqlens=fine)  # reported once


@needs_torch
def test_torch_serving_options_fall_back_with_flash_attention_semantics():
    """On the CPU every option runs on the PyTorch fallback: softcap and ALiBi by FlashAttention's
    rule, pages followed through the table (shuffled), cache_batch_idx, appends into the right pages."""
    api = _api()
    torch.manual_seed(8)
    _backends._warned.clear()
    q, k, v = torch.randn(2, 5, 4, 32), torch.randn(2, 9, 2, 32), torch.randn(2, 9, 2, 32)
    for options in ({"softcap": 2.0}, {"alibi_slopes": _slopes(4, "cpu")}, {"alibi_slopes": _slopes(4, "cpu", 2)},
                    {"softcap": 1.5, "alibi_slopes": _slopes(4, "cpu"), "causal": True}):
        _backends._warned.clear()
        with pytest.warns(api.FallbackWarning, match="on cpu"):
            out, lse = api.flash_attn_func(q, k, v, return_lse=True, **options)
        alibi = options.get("alibi_slopes")
        reference, reference_lse = _reference(q, k, v, options.get("causal", False), softcap=options.get("softcap", 0.0),
                                              alibi=alibi)
        torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse.double(), reference_lse, atol=1e-5, rtol=1e-5)
        # The backward (fmha._math) against autograd through the reference.
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        got = torch.autograd.grad(api.flash_attn_func(*leaves, **options).sum(), leaves)
        leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
        expected = torch.autograd.grad(_reference(*leaves64, options.get("causal", False), dtype=torch.float64,
                                                  softcap=options.get("softcap", 0.0), alibi=alibi)[0].sum(), leaves64)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.double(), e, atol=1e-4, rtol=1e-4)
    # A paged cache with appended tokens, against the same cache kept contiguous.
    cache_k, cache_v = torch.randn(3, 48, 2, 32), torch.randn(3, 48, 2, 32)
    q, new_k, new_v = torch.randn(3, 2, 4, 32), torch.randn(3, 2, 2, 32), torch.randn(3, 2, 2, 32)
    lengths = torch.tensor([0, 17, 46], dtype=torch.int32)
    pages_k, table = _to_pages(cache_k, 16)
    pages_v = torch.full_like(pages_k, float("nan"))
    pages_v[table.long().flatten()] = cache_v.reshape(-1, 16, 2, 32)
    slopes = _slopes(4, "cpu")
    out = api.flash_attn_with_kvcache(q, pages_k, pages_v, new_k, new_v, cache_seqlens=lengths, block_table=table,
                                      causal=True, softcap=3.0, alibi_slopes=slopes)
    for b, start in enumerate(lengths.tolist()):
        cache_k[b, start:start + 2], cache_v[b, start:start + 2] = new_k[b], new_v[b]
    assert torch.equal(_from_pages(pages_k, table), cache_k) and torch.equal(_from_pages(pages_v, table), cache_v)
    reference, _ = _reference(q, cache_k, cache_v, True, seqlens_kv=lengths + 2, softcap=3.0, alibi=slopes)
    torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-5)
    # cache_batch_idx: sequence b reads and appends to row index[b] of a larger cache.
    big_k, big_v = torch.randn(5, 20, 2, 32), torch.randn(5, 20, 2, 32)
    index = torch.tensor([4, 0, 2], dtype=torch.int32)
    expected_k, expected_v = big_k.clone(), big_v.clone()
    expected_k[index.long(), 7:9], expected_v[index.long(), 7:9] = new_k, new_v
    out = api.flash_attn_with_kvcache(q, big_k, big_v, new_k, new_v, cache_seqlens=7, cache_batch_idx=index)
    assert torch.equal(big_k, expected_k) and torch.equal(big_v, expected_v)
    reference, _ = _reference(q, big_k[index.long(), :9], big_v[index.long(), :9])
    torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-5)


_OPTION_SHAPES = [  # batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal
    (3, 1, 333, 8, 2, 128, False),    # decode, GQA
    (2, 3, 1025, 16, 2, 64, True),    # decode, several rows, causal
    (2, 77, 200, 8, 2, 64, False),    # prefill, odd lengths, GQA
    (1, 300, 300, 4, 4, 128, True),   # prefill, causal
    (2, 130, 517, 4, 1, 256, True),   # prefill, MQA, causal bottom-right
]


@needs_cuda
@pytest.mark.parametrize("options", ["softcap", "alibi", "alibi_per_batch_expanded", "both"])
@pytest.mark.parametrize("shape", _OPTION_SHAPES, ids=lambda s: "b{}_sq{}_skv{}_h{}_{}_d{}_{}".format(*s[:6], "causal" if s[6] else "nomask"))
def test_torch_softcap_and_alibi_match_fp64(shape, options):
    api = _api()
    batch, seqlen_q, seqlen_kv, heads, heads_kv, head_dim, causal = shape
    torch.manual_seed(9)
    q = _random(batch, seqlen_q, heads, head_dim)
    k, v = (_random(batch, seqlen_kv, heads_kv, head_dim) for _ in range(2))
    softcap = 8.0 if options in ("softcap", "both") else 0.0  # small enough that tanh bends the scores
    alibi = None
    if options in ("alibi", "both"):
        alibi = _slopes(heads, "cuda")
    elif options == "alibi_per_batch_expanded":
        alibi = _slopes(heads, "cuda").expand(batch, heads)  # FlashAttention's [batch, heads], one row
    choice = api.which_backend(q, k, v, causal=causal, softcap=softcap, alibi_slopes=alibi)
    assert choice.backend == "fmha", choice
    out, lse = api.flash_attn_func(q, k, v, causal=causal, softcap=softcap, alibi_slopes=alibi, return_lse=True,
                                   strict=True)
    reference, reference_lse = _reference(q, k, v, causal, softcap=softcap, alibi=alibi)
    pytorch, _ = _reference(q, k, v, causal, softcap=softcap, alibi=alibi, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)
    again = api.flash_attn_func(q, k, v, causal=causal, softcap=softcap, alibi_slopes=alibi)  # the kept launch
    assert torch.equal(again, out)


@needs_cuda
@pytest.mark.parametrize("seqlen_q, seqlen_kv, causal, head_dim", [(1, 300, False, 128), (2, 77, True, 64),
                                                                   (200, 333, True, 64), (129, 129, False, 128)])
def test_torch_alibi_slopes_per_sequence(seqlen_q, seqlen_kv, causal, head_dim):
    """FlashAttention's ALiBi slopes [batch, heads], a row per sequence, on the kernels (strict) in
    the decode and tensor-core prefill families, against the fp64 reference."""
    api = _api()
    torch.manual_seed(10)
    q, k, v = _random(3, seqlen_q, 8, head_dim), _random(3, seqlen_kv, 2, head_dim), _random(3, seqlen_kv, 2, head_dim)
    alibi = _slopes(8, "cuda", 3)
    choice = api.which_backend(q, k, v, causal=causal, alibi_slopes=alibi)
    assert choice.backend == "fmha", choice
    out, lse = api.flash_attn_func(q, k, v, causal=causal, alibi_slopes=alibi, return_lse=True, strict=True)
    reference, reference_lse = _reference(q, k, v, causal, alibi=alibi)
    _assert_flash_rule(out, reference, _reference(q, k, v, causal, alibi=alibi, dtype=q.dtype)[0])
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)
    # The rows do differ: the same slopes for every sequence give another answer.
    assert not torch.allclose(out, api.flash_attn_func(q, k, v, causal=causal, alibi_slopes=alibi[0], strict=True))


@needs_cuda
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (150, 37), (0, 40), (60, 0)], ids=str)
@pytest.mark.parametrize("sign", [1, -1], ids=["slopes_positive", "slopes_negative"])
@pytest.mark.parametrize("head_dim, softcap", [(64, 0.0), (128, 10.0), (256, 0.0)])
def test_torch_alibi_either_sign_and_side_matches_fp64(window, sign, head_dim, softcap):
    """ALiBi's bias, slope x |i - j| subtracted, for slopes of either sign (models' are positive;
    the API does not say so), with keys on both sides of the diagonal, causal and with windows
    reaching past it: the tensor-core prefill's forms (unmasked steps of a causal launch take
    keys at or below the diagonal), against the fp64 reference, several key tiles per row."""
    api = _api()
    torch.manual_seed(13)
    q, k, v = _random(2, 333, 8, head_dim), _random(2, 400, 2, head_dim), _random(2, 400, 2, head_dim)
    alibi = sign * _slopes(8, "cuda")
    options = dict(window_size=window, softcap=softcap, alibi_slopes=alibi)
    assert api.which_backend(q, k, v, **options).backend == "fmha"
    out, lse = api.flash_attn_func(q, k, v, return_lse=True, strict=True, **options)
    reference, reference_lse = _reference(q, k, v, window=window, softcap=softcap, alibi=alibi)
    pytorch, _ = _reference(q, k, v, window=window, softcap=softcap, alibi=alibi, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)


@needs_cuda
@pytest.mark.parametrize("page_size", [0, 16, 64])  # 0: not paged; 16: boxes from four producer warps, 64: two
def test_torch_varlen_softcap_alibi_and_pages(page_size):
    api = _api()
    torch.manual_seed(11)
    lengths_q, lengths_k = [5, 1, 37, 64, 130], [17, 1, 64, 90, 700]
    cu_q = torch.tensor([0] + lengths_q, device="cuda").cumsum(0).int()
    cu_k = torch.tensor([0] + lengths_k, device="cuda").cumsum(0).int()
    heads, heads_kv, head_dim = 8, 2, 128
    q = _random(sum(lengths_q), heads, head_dim)
    k, v = (_random(sum(lengths_k), heads_kv, head_dim) for _ in range(2))
    slopes = _slopes(heads, "cuda", len(lengths_q))  # a row per sequence
    options = dict(causal=True, softcap=10.0, alibi_slopes=slopes, return_lse=True, strict=True)
    if page_size:  # each sequence's keys in its own shuffled pages, NaN past them (a cache's unused rows)
        capacity = 768
        padded = torch.full((len(lengths_k), capacity, heads_kv, 2 * head_dim), float("nan"), dtype=q.dtype, device="cuda")
        for b in range(len(lengths_k)):
            padded[b, :lengths_k[b], :, :head_dim] = k[cu_k[b]:cu_k[b + 1]]
            padded[b, :lengths_k[b], :, head_dim:] = v[cu_k[b]:cu_k[b + 1]]
        pages, table = _to_pages(padded, page_size)
        k_pages, v_pages = pages[..., :head_dim], pages[..., head_dim:]  # views: rows 2 x head_dim apart
        out, lse = api.flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, max(lengths_q), max(lengths_k),
                                              block_table=table, **options)
    else:
        out, lse = api.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), **options)
    for b in range(len(lengths_q)):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        args = (q[rows].unsqueeze(0), k[keys].unsqueeze(0), v[keys].unsqueeze(0))
        reference, reference_lse = _reference(*args, causal=True, softcap=10.0, alibi=slopes[b:b + 1])
        pytorch, _ = _reference(*args, causal=True, softcap=10.0, alibi=slopes[b:b + 1], dtype=q.dtype)
        _assert_flash_rule(out[rows].unsqueeze(0), reference, pytorch, f"sequence {b}")
        torch.testing.assert_close(lse[:, rows].double(), reference_lse[0], atol=2e-3, rtol=1e-3)


@needs_cuda
def test_torch_varlen_decode_with_alibi_has_its_workspace():
    """One query a sequence with ALiBi runs the decode family's options variant, whose key splits
    differ from the plain variant's: the call's plan, made before the slopes' pointer exists, must
    size the workspace for the options variant (FwdParams::pointer_options; found by
    tools/random_calls.py: 'needs 2146560 bytes, got 495360')."""
    api = _api()
    torch.manual_seed(12)
    lengths_q, lengths_k = [1, 1, 1, 0, 1, 1, 0, 1, 0, 1], [1, 2, 1, 34, 1801, 608, 0, 1, 0, 0]
    cu_q = torch.tensor([0] + lengths_q, device="cuda").cumsum(0).int()
    cu_k = torch.tensor([0] + lengths_k, device="cuda").cumsum(0).int()
    heads, heads_kv, head_dim = 32, 4, 128
    q = _random(sum(lengths_q), heads, head_dim)
    k, v = (_random(sum(lengths_k), heads_kv, head_dim) for _ in range(2))
    slopes = _slopes(heads, "cuda")
    out = api.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=True,
                                     alibi_slopes=slopes, strict=True)
    for b in range(len(lengths_q)):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if lengths_q[b] == 0:
            continue
        if lengths_k[b] == 0:  # a row that sees no key: zeros
            assert torch.equal(out[rows], torch.zeros_like(out[rows])), f"sequence {b}"
            continue
        args = (q[rows].unsqueeze(0), k[keys].unsqueeze(0), v[keys].unsqueeze(0))
        reference, _ = _reference(*args, causal=True, alibi=slopes)
        pytorch, _ = _reference(*args, causal=True, alibi=slopes, dtype=q.dtype)
        _assert_flash_rule(out[rows].unsqueeze(0), reference, pytorch, f"sequence {b}")


@needs_cuda
@pytest.mark.parametrize("page_size, seqlen_q, heads, heads_kv, head_dim", [
    (16, 1, 8, 2, 128), (64, 4, 16, 2, 128), (256, 1, 4, 4, 128), (32, 40, 8, 1, 128),
    (16, 3, 6, 2, 59), (256, 1, 9, 3, 111)])  # element rows: 118- and 222-byte rows in the pages
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_kvcache_pages_and_options_match_fp64(page_size, seqlen_q, heads, heads_kv, head_dim, dtype):
    """Shuffled pages, new tokens appended through the table, per-sequence odd lengths, GQA/MQA,
    softcap and ALiBi: served by the kernels (strict), against the same cache kept contiguous."""
    api = _api()
    torch.manual_seed(12)
    dtype = getattr(torch, dtype)
    batch, capacity = 3, 1024
    cache_k, cache_v = (_random(batch, capacity, heads_kv, head_dim, dtype=dtype) for _ in range(2))
    pages_k, table = _to_pages(cache_k, page_size)
    pages_v = torch.full_like(pages_k, float("nan"))
    pages_v[table.long().flatten()] = cache_v.reshape(-1, page_size, heads_kv, head_dim)
    q = _random(batch, seqlen_q, heads, head_dim, dtype=dtype)
    new_k, new_v = (_random(batch, seqlen_q, heads_kv, head_dim, dtype=dtype) for _ in range(2))
    filled = torch.tensor([5, 333, capacity - seqlen_q], dtype=torch.int32, device="cuda")
    slopes = _slopes(heads, "cuda")
    out, lse = api.flash_attn_with_kvcache(q, pages_k, pages_v, new_k, new_v, cache_seqlens=filled, block_table=table,
                                           causal=True, softcap=20.0, alibi_slopes=slopes, return_softmax_lse=True,
                                           strict=True)
    for b, start in enumerate(filled.tolist()):
        cache_k[b, start:start + seqlen_q], cache_v[b, start:start + seqlen_q] = new_k[b], new_v[b]
    assert torch.equal(_from_pages(pages_k, table), cache_k) and torch.equal(_from_pages(pages_v, table), cache_v)
    lengths = filled + seqlen_q
    reference, reference_lse = _reference(q, cache_k, cache_v, True, seqlens_kv=lengths, softcap=20.0, alibi=slopes)
    pytorch, _ = _reference(q, cache_k, cache_v, True, seqlens_kv=lengths, softcap=20.0, alibi=slopes, dtype=dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)
    # Without new tokens, lengths as a tensor (the kept launch on the second call) and as an int.
    for _ in range(2):
        out = api.flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=lengths, block_table=table, strict=True)
        _assert_flash_rule(out, _reference(q, cache_k, cache_v, seqlens_kv=lengths)[0],
                           _reference(q, cache_k, cache_v, seqlens_kv=lengths, dtype=dtype)[0], "no new tokens")
    out = api.flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=300, block_table=table, strict=True)
    _assert_flash_rule(out, _reference(q, cache_k[:, :300], cache_v[:, :300])[0],
                       _reference(q, cache_k[:, :300], cache_v[:, :300], dtype=dtype)[0], "cache_seqlens=300")


@needs_cuda
def test_torch_kvcache_pages_the_kernels_do_not_take_fall_back_with_a_reason():
    api = _api()
    torch.manual_seed(13)
    cache_k, cache_v = _random(2, 1024, 2, 64), _random(2, 1024, 2, 64)
    pages_k, table = _to_pages(cache_k, 512)  # FlashAttention 2's page size; the kernels take 16 to 256
    pages_v = torch.full_like(pages_k, float("nan"))
    pages_v[table.long().flatten()] = cache_v.reshape(-1, 512, 2, 64)
    q = _random(2, 1, 8, 64)
    lengths = torch.tensor([700, 3], dtype=torch.int32, device="cuda")
    with pytest.raises(api.UnsupportedError, match="page_block_size 512"):
        api.flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=lengths, block_table=table, strict=True)
    _backends._warned.clear()
    with pytest.warns(api.FallbackWarning, match="gathering the pages.*page_block_size 512"):
        out = api.flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=lengths, block_table=table)
    _assert_flash_rule(out, _reference(q, cache_k, cache_v, seqlens_kv=lengths)[0],
                       _reference(q, cache_k, cache_v, seqlens_kv=lengths, dtype=q.dtype)[0])


@needs_cuda
def test_torch_kvcache_batch_index_and_overflow_on_the_gpu():
    api = _api()
    torch.manual_seed(14)
    big_k, big_v = _random(6, 256, 2, 128), _random(6, 256, 2, 128)
    index = torch.tensor([5, 1, 3], dtype=torch.int32, device="cuda")
    q, new_k, new_v = _random(3, 1, 8, 128), _random(3, 1, 2, 128), _random(3, 1, 2, 128)
    filled = torch.tensor([9, 200, 100], dtype=torch.int32, device="cuda")
    expected_k, expected_v = big_k.clone(), big_v.clone()
    for b, (row, start) in enumerate(zip(index.tolist(), filled.tolist())):
        expected_k[row, start], expected_v[row, start] = new_k[b, 0], new_v[b, 0]
    slopes = _slopes(8, "cuda").expand(3, 8)
    out = api.flash_attn_with_kvcache(q, big_k, big_v, new_k, new_v, cache_seqlens=filled, cache_batch_idx=index,
                                      alibi_slopes=slopes, strict=True)
    assert torch.equal(big_k, expected_k) and torch.equal(big_v, expected_v)
    rows, lengths = index.long(), filled + 1
    reference, _ = _reference(q, big_k[rows], big_v[rows], seqlens_kv=lengths, alibi=slopes)
    pytorch, _ = _reference(q, big_k[rows], big_v[rows], seqlens_kv=lengths, alibi=slopes, dtype=q.dtype)
    _assert_flash_rule(out, reference, pytorch)
    # An append past the capacity raises before anything is written.
    before_k, before_v = big_k.clone(), big_v.clone()
    overflowing = torch.tensor([9, 10, 256], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"must be in \[0, capacity 256\]: cache_seqlens range from 9 to 256"):
        api.flash_attn_with_kvcache(q, big_k, big_v, new_k, new_v, cache_seqlens=overflowing, cache_batch_idx=index)
    assert torch.equal(big_k, before_k) and torch.equal(big_v, before_v)


@needs_cuda
@pytest.mark.parametrize("causal", [False, True])
def test_torch_kvcache_left_padding(causal):
    """cache_leftpad as FlashAttention: sequence b's keys are [leftpad[b], cache_seqlens[b] + new)."""
    api = _api()
    torch.manual_seed(16)
    k_cache, v_cache = _random(3, 300, 2, 128), _random(3, 300, 2, 128)
    q, new_k, new_v = _random(3, 2, 8, 128), _random(3, 2, 2, 128), _random(3, 2, 2, 128)
    leftpad = torch.tensor([0, 37, 120], dtype=torch.int32, device="cuda")
    filled = torch.tensor([5, 200, 121], dtype=torch.int32, device="cuda")
    out = api.flash_attn_with_kvcache(q, k_cache, v_cache, new_k, new_v, cache_seqlens=filled, cache_leftpad=leftpad,
                                      causal=causal, strict=True)
    for b, (start, end) in enumerate(zip(leftpad.tolist(), (filled + 2).tolist())):
        assert torch.equal(k_cache[b, end - 2:end], new_k[b]) and torch.equal(v_cache[b, end - 2:end], new_v[b])
        keys, values = k_cache[b:b + 1, start:end], v_cache[b:b + 1, start:end]
        reference, _ = _reference(q[b:b + 1], keys, values, causal)
        pytorch, _ = _reference(q[b:b + 1], keys, values, causal, dtype=q.dtype)
        _assert_flash_rule(out[b:b + 1], reference, pytorch)
    with pytest.raises(ValueError, match=r"cache_leftpad must be in \[0, cache_seqlens"):
        api.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=filled, cache_leftpad=filled + 3)


@needs_cuda
def test_torch_paged_decode_in_a_cuda_graph():
    """A paged decode step with ALiBi, captured once and replayed with lengths changed in place."""
    api = _api()
    torch.manual_seed(15)
    cache_k, cache_v = _random(2, 2048, 2, 128), _random(2, 2048, 2, 128)
    pages_k, table = _to_pages(cache_k, 64)
    pages_v = torch.full_like(pages_k, float("nan"))
    pages_v[table.long().flatten()] = cache_v.reshape(-1, 64, 2, 128)
    q, slopes = _random(2, 1, 16, 128), _slopes(16, "cuda")
    lengths = torch.tensor([1000, 17], dtype=torch.int32, device="cuda")
    graph, out = _capture(lambda: api.flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=lengths,
                                                              block_table=table, alibi_slopes=slopes, strict=True))
    for new_lengths in ([1000, 17], [2048, 1], [5, 1999]):
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        reference, _ = _reference(q, cache_k, cache_v, seqlens_kv=lengths, alibi=slopes)
        pytorch, _ = _reference(q, cache_k, cache_v, seqlens_kv=lengths, alibi=slopes, dtype=q.dtype)
        _assert_flash_rule(out, reference, pytorch, f"replay with lengths {new_lengths}")


# ---------------------------------------------------------------- the append: rotary, one launch, overflow

def _rotary_tables(seqlen_ro, rotary_dim, dtype, device):
    """cos, sin [seqlen_ro, rotary_dim / 2] of random angles (no pattern a wrong pairing would pass)."""
    angles = torch.rand(seqlen_ro, rotary_dim // 2, device=device, dtype=torch.float64) * 2 * math.pi
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _turned(x, cos, sin, positions, interleaved):
    """FlashAttention's rotary embedding, written as complex products in fp64: x [b, s, h, d],
    positions [b, s]; pairs (2i, 2i + 1) where interleaved, else (i, i + rotary_dim / 2)."""
    half = cos.shape[1]
    angle = torch.complex(cos.double(), sin.double())[positions.long()].unsqueeze(2)  # [b, s, 1, half]
    turning = x[..., :2 * half].double()
    if interleaved:
        pairs = torch.view_as_complex(turning.reshape(*turning.shape[:-1], half, 2).contiguous()) * angle
        turned = torch.view_as_real(pairs).flatten(-2)
    else:
        pairs = torch.complex(turning[..., :half], turning[..., half:]) * angle
        turned = torch.cat((pairs.real, pairs.imag), dim=-1)
    return torch.cat((turned, x[..., 2 * half:].double()), dim=-1)


def _expected_append(cache_k, cache_v, q, new_k, new_v, starts, rotary, causal, rows=None):
    """FlashAttention's semantics on a contiguous cache [rows, capacity, h, d] (fp64 where rotated):
    (cache_k, cache_v after the append, the queries attention sees). starts: [batch] ints."""
    batch, new = new_k.shape[:2]
    positions = torch.tensor(starts, device=q.device).unsqueeze(1) + torch.arange(new, device=q.device)
    cache_k, cache_v, q_seen = cache_k.clone(), cache_v.clone(), q.double()
    if rotary is not None:
        cos, sin, interleaved = rotary
        new_k = _turned(new_k, cos, sin, positions, interleaved).to(new_k.dtype)
        at = torch.tensor(starts, device=q.device).unsqueeze(1) + (torch.arange(q.shape[1], device=q.device) if causal
                                                                   else torch.zeros(1, dtype=torch.long, device=q.device))
        q_seen = _turned(q, cos, sin, at.expand(batch, q.shape[1]), interleaved)
    for b, start in enumerate(starts):
        row = b if rows is None else rows[b]
        cache_k[row, start:start + new], cache_v[row, start:start + new] = new_k[b], new_v[b]
    return cache_k, cache_v, q_seen


def _assert_cache(got, expected, what):
    """Within a rounding of the rotation (the kernel's fp32 against the reference's fp64, each
    rounded once), NaN only where expected (the pool's unused pages)."""
    same = (got == expected) | (got.isnan() & expected.isnan())
    bad = ~(same | torch.isclose(got.double(), expected.double(), rtol=1e-2, atol=1e-2))
    assert not bad.any(), f"{what}: {int(bad.sum())} elements differ, the first at {bad.nonzero()[0].tolist()}"


_APPEND_CASES = [  # layout, seqlen_new, rotary_dim (of d128), interleaved, causal, int lengths, dtype
    ("contiguous", 1, 128, True, True, False, "bfloat16"),
    ("contiguous", 3, 64, False, True, False, "float16"),
    ("contiguous", 16, 32, True, True, True, "bfloat16"),
    ("contiguous", 5, 128, False, False, False, "float16"),  # queries at one position (not causal)
    ("batch_idx", 2, 128, False, True, False, "bfloat16"),
    ("batch_idx", 1, 96, True, False, True, "float16"),
    ("paged16", 7, 128, True, True, False, "float16"),
    ("paged64", 16, 64, False, True, False, "bfloat16"),
    ("paged256", 1, 128, False, True, True, "bfloat16"),
    ("paged16", 4, 0, False, True, False, "bfloat16"),  # no rotary: the append alone
]


@needs_cuda
@pytest.mark.parametrize("case", _APPEND_CASES, ids=lambda c: "{}_new{}_rot{}_{}_{}_{}_{}".format(
    c[0], c[1], c[2], "inter" if c[3] else "neox", "causal" if c[4] else "nomask", "int" if c[5] else "tensor", c[6]))
def test_torch_kvcache_append_and_rotary_match_flash_attention(case):
    """New tokens written (rotated) into the cache in one launch, the queries rotated by
    FlashAttention's rule, and the attention over the result: against a plain PyTorch reference."""
    layout, new, rotary_dim, interleaved, causal, int_lengths, dtype = case
    api = _api()
    from fmha import _append
    torch.manual_seed(17 + new + rotary_dim)
    dtype = getattr(torch, dtype)
    batch, capacity, heads, heads_kv, head_dim = 3, 512, 32, 8, 128
    rows = 5 if layout == "batch_idx" else batch
    cache_k, cache_v = (_random(rows, capacity, heads_kv, head_dim, dtype=dtype) for _ in range(2))
    q = _random(batch, new, heads, head_dim, dtype=dtype)
    new_k, new_v = (_random(batch, new, heads_kv, head_dim, dtype=dtype) for _ in range(2))
    starts = [300] * batch if int_lengths else [0, 211, capacity - new]
    rotary = None
    options = {}
    if rotary_dim:
        cos, sin = _rotary_tables(capacity + 9, rotary_dim, dtype, "cuda")
        rotary = (cos, sin, interleaved)
        options = dict(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved)
    index = torch.tensor([4, 0, 2], dtype=torch.int32, device="cuda") if layout == "batch_idx" else None
    expected_k, expected_v, q_seen = _expected_append(cache_k, cache_v, q, new_k, new_v, starts, rotary, causal,
                                                      None if index is None else index.tolist())
    q_seen = q_seen.to(dtype)  # the rotated queries, rounded as the kernel stores them (FlashAttention's test too)
    lengths = starts[0] if int_lengths else torch.tensor(starts, dtype=torch.int32, device="cuda")
    table = None
    if layout.startswith("paged"):
        page_size = int(layout[5:])
        pages_k, table = _to_pages(cache_k, page_size)
        pages_v = torch.full_like(pages_k, float("nan"))
        pages_v[table.long().flatten()] = cache_v.reshape(-1, page_size, heads_kv, head_dim)
        expected_pages_k, expected_pages_v = pages_k.clone(), pages_v.clone()
        expected_pages_k[table.long().flatten()] = expected_k.reshape(-1, page_size, heads_kv, head_dim)
        expected_pages_v[table.long().flatten()] = expected_v.reshape(-1, page_size, heads_kv, head_dim)
        targets = (pages_k, pages_v, expected_pages_k, expected_pages_v)
    else:
        targets = (cache_k, cache_v, expected_k, expected_v)
    q_before = q.clone()
    launches = []
    real_append = _append._append_by_kernel
    with pytest.MonkeyPatch.context() as patch:  # the append must be the kernel's, not the PyTorch fallback
        patch.setattr(_append, "_append_by_kernel", lambda *a: launches.append(1) or real_append(*a))
        patch.setattr(_append, "_append_by_torch", lambda *a: pytest.fail("the append fell back to PyTorch ops"))
        out, lse = api.flash_attn_with_kvcache(q, targets[0], targets[1], new_k, new_v, cache_seqlens=lengths,
                                               cache_batch_idx=index, block_table=table, causal=causal,
                                               return_softmax_lse=True, strict=True, **options)
    assert launches == [1]
    assert torch.equal(q, q_before), "q itself was changed"
    _assert_cache(targets[0], targets[2], "k_cache")
    assert torch.equal(targets[1].nan_to_num(7.0), targets[3].nan_to_num(7.0)), "v_cache"
    keys = (expected_k, expected_v) if index is None else (expected_k[index.long()], expected_v[index.long()])
    seen = [s + new for s in starts]
    reference, reference_lse = _reference(q_seen, *keys, causal, seqlens_kv=seen)
    pytorch, _ = _reference(q_seen, *keys, causal, seqlens_kv=seen, dtype=dtype)
    _assert_flash_rule(out, reference, pytorch)
    torch.testing.assert_close(lse.double(), reference_lse, atol=2e-3, rtol=1e-3)


@needs_torch
@pytest.mark.parametrize("interleaved", [True, False])
def test_torch_kvcache_rotary_on_pytorch_ops_matches_flash_attention(interleaved):
    """The append's PyTorch path (CPU tensors here): the same rule as the kernel, rotary_dim < head_dim."""
    api = _api()
    torch.manual_seed(18)
    cache_k, cache_v = torch.randn(2, 40, 2, 32), torch.randn(2, 40, 2, 32)
    q, new_k, new_v = torch.randn(2, 3, 4, 32), torch.randn(2, 3, 2, 32), torch.randn(2, 3, 2, 32)
    cos, sin = _rotary_tables(40, 16, torch.float32, "cpu")
    starts = [5, 30]
    for causal in (True, False):
        expected_k, expected_v, q_seen = _expected_append(cache_k, cache_v, q, new_k, new_v, starts,
                                                          (cos, sin, interleaved), causal)
        k_cache, v_cache = cache_k.clone(), cache_v.clone()
        out = api.flash_attn_with_kvcache(q, k_cache, v_cache, new_k, new_v, cos, sin,
                                          cache_seqlens=torch.tensor(starts, dtype=torch.int32), causal=causal,
                                          rotary_interleaved=interleaved)
        torch.testing.assert_close(k_cache.double(), expected_k.double(), atol=1e-5, rtol=1e-5)
        assert torch.equal(v_cache, expected_v)
        reference, _ = _reference(q_seen, expected_k, expected_v, causal, seqlens_kv=[s + 3 for s in starts])
        torch.testing.assert_close(out.double(), reference, atol=1e-5, rtol=1e-5)


@needs_torch
def test_torch_kvcache_rotary_bad_arguments_raise_naming_them():
    api = _api()
    q, cache, new = torch.zeros(2, 1, 4, 64), torch.zeros(2, 16, 2, 64), torch.zeros(2, 1, 2, 64)
    cos = torch.zeros(16, 16)
    cases = [
        (dict(rotary_cos=cos), ValueError, "rotary_cos and rotary_sin must be given together"),
        (dict(k=None, v=None, rotary_cos=cos, rotary_sin=cos), ValueError, "they need k and v"),
        (dict(rotary_cos=cos.half(), rotary_sin=cos.half()), TypeError, "rotary_cos must have q's dtype torch.float32"),
        (dict(rotary_cos=cos[0], rotary_sin=cos[0]), ValueError, "rotary_cos must be 2-D [seqlen_ro, rotary_dim / 2]"),
        (dict(rotary_cos=cos, rotary_sin=cos[:, :8]), ValueError, "must have one shape"),
        (dict(rotary_cos=torch.zeros(16, 40), rotary_sin=torch.zeros(16, 40)), ValueError,
         "rotary_dim (2 x rotary_cos.shape[1] = 80) must be at most head_dim 64"),
        (dict(rotary_cos=cos[:15], rotary_sin=cos[:15]), ValueError, "seqlen_ro 15 < capacity 16"),
        (dict(rotary_cos="cos", rotary_sin=cos), TypeError, "rotary_cos must be a torch.Tensor"),
    ]
    for options, error, message in cases:
        arguments = dict(k=new, v=new, cache_seqlens=3) | options
        with pytest.raises(error) as raised:
            api.flash_attn_with_kvcache(q, cache, cache.clone(), **arguments)
        assert message in str(raised.value), raised.value


@needs_cuda
def test_torch_kvcache_append_in_a_cuda_graph_refuses_an_overflow():
    """An append with rotary captured once and replayed with lengths changed in place: each replay
    writes the rotated tokens where the lengths say; a replay whose lengths pass the capacity
    writes nothing of that sequence, and the next eager call raises, once."""
    api = _api()
    torch.manual_seed(19)
    batch, capacity, heads, heads_kv, head_dim, new = 2, 256, 16, 4, 128, 2
    cache_k, cache_v = _random(batch, capacity, heads_kv, head_dim), _random(batch, capacity, heads_kv, head_dim)
    pages_k, table = _to_pages(cache_k, 64)
    pages_v = torch.full_like(pages_k, float("nan"))
    pages_v[table.long().flatten()] = cache_v.reshape(-1, 64, heads_kv, head_dim)
    q, new_k, new_v = _random(batch, new, heads, head_dim), _random(batch, new, heads_kv, head_dim), _random(
        batch, new, heads_kv, head_dim)
    cos, sin = _rotary_tables(capacity, 64, q.dtype, "cuda")
    lengths = torch.tensor([10, 100], dtype=torch.int32, device="cuda")

    def step():
        return api.flash_attn_with_kvcache(q, pages_k, pages_v, new_k, new_v, cos, sin, cache_seqlens=lengths,
                                           block_table=table, causal=True, rotary_interleaved=False, strict=True)

    graph, out = _capture(step)
    for starts in ([0, 37], [200, capacity - new], [capacity - 1, 5]):
        before_k, before_v = _from_pages(pages_k, table), _from_pages(pages_v, table)
        lengths.copy_(torch.tensor(starts, dtype=torch.int32))
        for t in (q, new_k, new_v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        torch.cuda.synchronize()
        fits = [s + new <= capacity for s in starts]
        expected_k, expected_v, q_seen = _expected_append(before_k, before_v, q, new_k, new_v,
                                                          [s if f else 0 for s, f in zip(starts, fits)],
                                                          (cos, sin, False), True)
        q_seen = q_seen.to(q.dtype)
        for b, fit in enumerate(fits):
            if not fit:  # refused: the sequence's cache as it was
                expected_k[b], expected_v[b] = before_k[b], before_v[b]
        _assert_cache(_from_pages(pages_k, table), expected_k, f"replay with lengths {starts}")
        assert torch.equal(_from_pages(pages_v, table), expected_v)
        for b, (start, fit) in enumerate(zip(starts, fits)):
            if fit:
                args = (q_seen[b:b + 1], expected_k[b:b + 1], expected_v[b:b + 1])
                reference, _ = _reference(*args, True, seqlens_kv=[start + new])
                pytorch, _ = _reference(*args, True, seqlens_kv=[start + new], dtype=q.dtype)
                _assert_flash_rule(out[b:b + 1], reference, pytorch, f"replay with lengths {starts}")
        if not all(fits):
            lengths.copy_(torch.tensor([0, 0], dtype=torch.int32))
            with pytest.raises(ValueError, match="was refused at a replay: a sequence's cache_seqlens \\+ new tokens"):
                step()
            step()  # reported once
