#!/usr/bin/env python3
"""Forward + backward on the device (a benchmark, not a test): flash_attn_func with its backward
kernel against PyTorch's SDPA flash (FlashAttention-2) and cuDNN backends on issue 31's shapes,
bf16. Reported: TFLOP/s by FlashAttention's count (forward 4 b h s_q s_kv d, halved when causal;
forward + backward = 3.5x forward), median of alternating rounds, and the peak allocation
beyond the inputs over the size of q, k and v. --dropout P: every call with dropout_p = P, and
SDPA's memory-efficient backend beside the others (cuDNN's may decline dropout). --options:
softcapping and ALiBi (options()).

    python3 benchmarks/training.py [--rounds N] [--runs N] [--cases NAME... | --sweep | --varlen | --options]
                                   [--dropout P]
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import device_ms  # noqa: E402  (CUDA-event timing)

# name -> (batch, seqlen, heads, heads_kv, head_dim, causal)
CASES = {
    "b4_s2k_h16_d128": (4, 2048, 16, 16, 128, False),
    "b4_s2k_h16_d128_causal": (4, 2048, 16, 16, 128, True),
    "b2_s4k_h16_d64_causal": (2, 4096, 16, 16, 64, True),
    "b1_s8k_h32_8_d128_causal": (1, 8192, 32, 8, 128, True),
    "b1_s16k_h16_d128_causal": (1, 16384, 16, 16, 128, True),
    "b2_s4k_h8_d256_causal": (2, 4096, 8, 8, 256, True),
    "b1_s32k_h16_d128_causal": (1, 32768, 16, 16, 128, True),  # the "s32k causal d128 trains"
}
# Head dims between the kernels' (64, 128, 256), run on the next larger one: --cases NAME...
OTHER_HEAD_DIMS = {
    "b4_s2k_h16_d96_causal": (4, 2048, 16, 16, 96, True),
    "b2_s4k_h32_8_d80_causal": (2, 4096, 32, 8, 80, True),
    "b2_s4k_h8_d192_causal": (2, 4096, 8, 8, 192, True),
}
# Packed batches (flash_attn_varlen_func): name -> (sequence lengths, heads, heads_kv, head_dim, causal).
VARLEN = {
    "varlen_8x2k_h16_d128_causal": ([2048] * 8, 16, 16, 128, True),
    "varlen_8k_31x128_h16_d128_causal": ([8192] + [128] * 31, 16, 16, 128, True),  # one long prompt, many short
    "varlen_16k_255x64_h16_d128_causal": ([16384] + [64] * 255, 16, 16, 128, True),
    "varlen_mixed_h32_8_d128_causal": ([64 + (1237 * i) % 4000 for i in range(16)], 32, 8, 128, True),
    "varlen_mixed_h16_d64": ([64 + (1237 * i) % 4000 for i in range(16)], 16, 16, 64, False),
}
# FlashAttention-3's sweep (batch x seqlen = 16k, heads x head_dim = 2048), as benchmarks/shapes.py.
SWEEP = {
    f"fa3_d{d}_s{s // 1024}k{'_causal' if causal else ''}": (16384 // s, s, 2048 // d, 2048 // d, d, causal)
    for d in (64, 128) for s in (1024, 4096, 16384) for causal in (False, True)
}


def inputs(batch, seqlen, heads, heads_kv, head_dim):
    """(q, k, v, dO, the bytes of q, k and v) of a case, bf16, seeded, q, k and v leaves."""
    import torch
    torch.manual_seed(0)
    q = torch.randn(batch, seqlen, heads, head_dim, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    k, v = (torch.randn(batch, seqlen, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda", requires_grad=True)
            for _ in range(2))
    return q, k, v, torch.randn_like(q), sum(t.numel() * t.element_size() for t in (q, k, v))


def measure(name, calls, input_bytes, args):
    """({call: [ms per round]}, {call: peak allocation beyond the inputs / input_bytes}) of
    alternating rounds; a call that raises (a backend that does not take the shape, out of
    memory) is reported and left out."""
    import torch
    times, memory = {n: [] for n in calls}, {}
    for n, call in list(calls.items()):
        try:
            call()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            call()
            torch.cuda.synchronize()
            memory[n] = (torch.cuda.max_memory_allocated() - base) / input_bytes
        except RuntimeError as error:  # (torch.cuda.OutOfMemoryError is one)
            print(f"{name}: {n} failed: {str(error).splitlines()[0]}")
            calls[n] = None
            torch.cuda.empty_cache()
    # The order reversed every round: a fixed order gave the call after another's long runs a
    # device state of its own (docs/decisions.md, "The steps grid in rounds").
    order = [n for n, call in calls.items() if call is not None]
    for round_ in range(args.rounds):
        for n in order if round_ % 2 == 0 else order[::-1]:
            times[n].append(device_ms(calls[n], args.runs, warmup=2))
    return times, memory


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cases", nargs="+", default=list(CASES), help=f"of {', '.join(list(CASES) + list(SWEEP) + list(OTHER_HEAD_DIMS))}")
    parser.add_argument("--sweep", action="store_true", help="FlashAttention-3's sweep instead of the issue's cases")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--varlen", action="store_true", help="packed batches (flash_attn_varlen_func) instead")
    parser.add_argument("--options", action="store_true", help="softcapping and ALiBi against the plain call")
    args = parser.parse_args()
    if args.varlen:
        return varlen(args)
    if args.options:
        return options(args)
    p = args.dropout
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fmha
    from fmha import _backward

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, dropout_p {p}")
    print("| case | fmha | FA2 (SDPA flash) | SDPA efficient | cuDNN | fmha / cuDNN | fmha memory | cuDNN memory | "
          "bwd kernel |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases = dict(CASES, **SWEEP, **OTHER_HEAD_DIMS)
    for name in list(SWEEP) if args.sweep else args.cases:
        batch, seqlen, heads, heads_kv, head_dim, causal = cases[name]
        q, k, v, grad, input_bytes = inputs(batch, seqlen, heads, heads_kv, head_dim)
        kernel = _backward.kernel_name(q.detach(), k.detach(), head_dim ** -0.5, -1, 0 if causal else -1, p)

        def ours():
            out = fmha.flash_attn_func(q, k, v, dropout_p=p, causal=causal, strict=True)
            return torch.autograd.grad(out, (q, k, v), grad)

        def sdpa(backend):
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qt, kt, vt, dropout_p=p, is_causal=causal,
                                                     enable_gqa=heads != heads_kv)
            return torch.autograd.grad(out, (q, k, v), grad.transpose(1, 2))

        calls = {"fmha": ours, "FA2": lambda: sdpa(SDPBackend.FLASH_ATTENTION),
                 "efficient": lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION),
                 "cuDNN": lambda: sdpa(SDPBackend.CUDNN_ATTENTION)}
        times, memory = measure(name, calls, input_bytes, args)
        flops = 3.5 * 4 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)
        tflops = {n: flops / statistics.median(t) / 1e9 if t else float("nan") for n, t in times.items()}
        print(f"| {name} | {tflops['fmha']:.1f} | {tflops['FA2']:.1f} | {tflops['efficient']:.1f} | "
              f"{tflops['cuDNN']:.1f} | "
              f"{tflops['fmha'] / tflops['cuDNN']:.2f} | {memory.get('fmha', float('nan')):.1f}x | "
              f"{memory.get('cuDNN', float('nan')):.1f}x | {kernel} |", flush=True)


def options(args):
    """Softcapping (Gemma-2's cap, 50) and ALiBi (standard slopes) in training, forward +
    backward: fmha with each against the plain call; the backward recomputed in PyTorch (what
    fmha did before its kernels took the options, with the N x N probabilities in fp32); and
    SDPA's memory-efficient backend with ALiBi as an additive bias (PyTorch has no softcap).
    TFLOP/s and memory as main()'s."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fmha
    from fmha import _backward

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | fmha plain | fmha softcap 50 | / plain | fmha ALiBi | / plain | softcap, PyTorch recompute | "
          "ALiBi, SDPA efficient + bias | fmha softcap memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases:
        batch, seqlen, heads, heads_kv, head_dim, causal = CASES[name]
        q, k, v, grad, input_bytes = inputs(batch, seqlen, heads, heads_kv, head_dim)
        slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda")
        position = torch.arange(seqlen, device="cuda")  # SDPA's ALiBi bias, built once as an engine would
        bias = -(slopes.view(-1, 1, 1) * (position.view(-1, 1) - position).abs()).to(torch.bfloat16)
        if causal:
            bias = bias.masked_fill(position.view(-1, 1) < position, float("-inf"))

        def ours(**kw):
            out = fmha.flash_attn_func(q, k, v, causal=causal, strict=True, **kw)
            return torch.autograd.grad(out, (q, k, v), grad)

        def recomputed():
            real, _backward.run = _backward.run, lambda *a, **kw: None  # the backward before its kernels
            try:
                return ours(softcap=50.0)
            finally:
                _backward.run = real

        def sdpa_alibi():
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
                out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias.unsqueeze(0), enable_gqa=heads != heads_kv)
            return torch.autograd.grad(out, (q, k, v), grad.transpose(1, 2))

        calls = {"plain": ours, "softcap": lambda: ours(softcap=50.0), "alibi": lambda: ours(alibi_slopes=slopes),
                 "recompute": recomputed, "sdpa": sdpa_alibi}
        times, memory = measure(name, calls, input_bytes, args)
        flops = 3.5 * 4 * batch * heads * seqlen * seqlen * head_dim * (0.5 if causal else 1.0)
        tf = {n: flops / statistics.median(t) / 1e9 if t else float("nan") for n, t in times.items()}
        print(f"| {name} | {tf['plain']:.1f} | {tf['softcap']:.1f} | {tf['softcap'] / tf['plain']:.2f} | "
              f"{tf['alibi']:.1f} | {tf['alibi'] / tf['plain']:.2f} | {tf['recompute']:.1f} | {tf['sdpa']:.1f} | "
              f"{memory.get('softcap', float('nan')):.1f}x |", flush=True)


def varlen(args):
    """Packed batches, forward + backward: flash_attn_varlen_func on the packed kernels; the same
    path forced onto padding (the sequences gathered into [batch, longest, h, d], as before the
    packed backward); and the same sequences as dense calls, one per group of equal lengths, by
    fmha and SDPA's cuDNN and flash backends. TFLOP/s by the sequences' own sizes; memory as
    main()'s (the packed call's and the padded one's)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import fmha
    from fmha import _varlen

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, dropout_p {args.dropout}")
    print("| case | fmha packed | fmha padded | fmha dense groups | cuDNN dense groups | FA2 dense groups | "
          "packed memory | padded memory |")
    print("|---|---|---|---|---|---|---|---|")
    packed_serves = _varlen.serves
    for name, (lengths, heads, heads_kv, head_dim, causal) in VARLEN.items():
        torch.manual_seed(0)
        cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
        total = sum(lengths)
        q = torch.randn(total, heads, head_dim, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        k, v = (torch.randn(total, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda", requires_grad=True)
                for _ in range(2))
        grad = torch.randn_like(q)
        input_bytes = sum(t.numel() * t.element_size() for t in (q, k, v))
        groups = {}  # length -> its sequences' token rows
        for b, length in enumerate(lengths):
            groups.setdefault(length, []).append(torch.arange(int(cu[b]), int(cu[b]) + length, device="cuda"))
        dense = {n: [t.detach()[torch.stack(rows)].clone().requires_grad_() for t in (q, k, v)]
                 for n, rows in groups.items()}
        dense_grads = {n: grad[torch.stack(rows)] for n, rows in groups.items()}

        def packed(padded=False):
            _varlen.serves = (lambda *a: False) if padded else packed_serves
            try:
                out = fmha.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), dropout_p=args.dropout,
                                                  causal=causal)
                return torch.autograd.grad(out, (q, k, v), grad)
            finally:
                _varlen.serves = packed_serves

        def groups_of(attend):
            for n, leaves in dense.items():
                torch.autograd.grad(attend(*leaves), leaves, dense_grads[n])

        def sdpa(backend):
            def attend(q, k, v):
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), dropout_p=args.dropout,
                                                         is_causal=causal, enable_gqa=heads != heads_kv)
                return out.transpose(1, 2)
            return lambda: groups_of(attend)

        calls = {"packed": packed, "padded": lambda: packed(padded=True),
                 "dense": lambda: groups_of(lambda q, k, v: fmha.flash_attn_func(q, k, v, dropout_p=args.dropout,
                                                                                   causal=causal)),
                 "cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION), "FA2": sdpa(SDPBackend.FLASH_ATTENTION)}
        times, memory = measure(name, calls, input_bytes, args)
        flops = sum(3.5 * 4 * heads * n * n * head_dim * (0.5 if causal else 1.0) for n in lengths)
        tflops = {n: f"{flops / statistics.median(t) / 1e9:.1f}" if t else "failed" for n, t in times.items()}
        print(f"| {name} | {tflops['packed']} | {tflops['padded']} | {tflops['dense']} | {tflops['cuDNN']} | "
              f"{tflops['FA2']} | {memory.get('packed', float('nan')):.1f}x | "
              f"{memory.get('padded', float('nan')):.1f}x |", flush=True)


if __name__ == "__main__":
    main()
