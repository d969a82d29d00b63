#!/usr/bin/env python3
"""Random calls through fmha's Python API, each checked against a float64 reference written
here (a sweep, not a test; the GPU counterpart of tools/random_problems.py for fmha.exe).

Draws flash_attn_func (forward, and backward through autograd), flash_attn_varlen_func
(empty and one-token sequences, a paged cache with shuffled pages, backward) and
flash_attn_with_kvcache (int or tensor lengths, appended tokens, rotary, cache_batch_idx, a
paged cache) over head dims 8 to 256, MHA/GQA/MQA, fp16/bf16, masks and windows, softcapping,
ALiBi and odd scales. The rule is FlashAttention's own tests': the error against float64 at
most twice that of the same math in the inputs' dtype, plus a small floor. Each call runs
strict first (a kernel serves it or it is refused), refused calls again on the fallback.
Prints every call that fails, raises, or leaves NaN.

    FMHA_LIBRARY=build/nvidia/libfmha.so PYTHONPATH=python python3 tools/random_calls.py [--seconds 300] [--seed 1]
"""
import argparse
import math
import random
import time

import torch

import fmha


def reference(q, k, v, scale, left, right, softcap, slopes):
    """One sequence: q [sq, h, d], k, v [sk, hk, d] in the dtype the math runs in. Returns out
    [sq, h, d] and the LSE [h, sq] (-inf where a row sees no key); rows that see no key give 0."""
    sq, heads, _ = q.shape
    sk, heads_kv = k.shape[:2]
    k, v = (t.repeat_interleave(heads // heads_kv, dim=1) for t in (k, v))
    # The dot products rounded to the inputs' dtype, the rest in fp32 (float64 for the exact one),
    # as FlashAttention's tests' reference does with a float bias.
    s = torch.einsum("qhd,khd->hqk", q, k)
    s = (s if s.dtype == torch.float64 else s.float()) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq  # bottom-right aligned
    j = torch.arange(sk, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes.to(s.dtype)[:, None, None] * (i - j).abs()
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    s = s.masked_fill(~visible, -math.inf)
    seen = visible.any(-1)[None, :, None]
    lse = torch.logsumexp(s, -1).masked_fill(~seen[..., 0], -math.inf)
    p = torch.softmax(torch.where(seen, s, 0), -1) * seen  # no NaN in rows that see no key
    return torch.einsum("hqk,khd->qhd", p.to(v.dtype), v), lse


def sequences_reference(qs, ks, vs, scale, left, right, softcap, slopes, dtype):
    """reference() over lists of sequences, in `dtype`; slopes [batch, heads] or None."""
    outs, lses = [], []
    for b, (q, k, v) in enumerate(zip(qs, ks, vs)):
        o, lse = reference(q.to(dtype), k.to(dtype), v.to(dtype), scale, left, right, softcap,
                           None if slopes is None else slopes[b])
        outs.append(o)
        lses.append(lse)
    return outs, lses


def allowed(kernel, exact, low, floor):
    """FlashAttention's rule: |kernel - exact| <= 2 max |low - exact| + floor, each element's error
    less half an ulp of a 16-bit kernel dtype at its exact value (the kernel's own final rounding,
    which the low-precision reference's largest error need not have met). Returns a complaint or None."""
    if not torch.isfinite(kernel).all():
        return "non-finite values"
    if not kernel.numel():
        return None
    exact = exact.double()
    half_ulp = torch.finfo(kernel.dtype).eps / 2 if kernel.dtype.itemsize == 2 else 0.0
    err = ((kernel.double() - exact).abs() - half_ulp * exact.abs()).max().item()
    base = (low.double() - exact).abs().max().item()
    return None if err <= 2 * base + floor else f"max abs err {err:.3e} (less half an ulp) > 2 x {base:.3e} + {floor:.0e}"


def lse_complaint(kernel, exact, low, softcap):
    """LSE [..., rows]: -inf exactly where the reference's row sees no key; elsewhere
    FlashAttention's rule against the low-precision reference (whose scores are rounded, as a
    kernel's rotated queries are) with a floor of 2e-3 (and tanh.approx's error with softcap)."""
    kernel, exact, low = kernel.double(), exact.double(), low.double()
    finite = torch.isfinite(exact)
    if (torch.isfinite(kernel) != finite).any() or (kernel[~finite] != exact[~finite]).any():
        return "rows that see no key (or only those) must be -inf"
    return allowed(kernel[finite], exact[finite], low[finite], 2e-3 + softcap * 2 ** -10)


FOCUS = {}  # --dtype, --softcap: draws held to one dtype, or always softcapped


def draw_common(rng):
    dtype = FOCUS.get("dtype") or rng.choice([torch.float16, torch.bfloat16])
    head_dim = rng.choice([64, 128, 256, 64, 128, 32, 40, 80, 96, 160, 192, 8, 59, 111, 200])
    heads_kv = rng.choice([1, 2, 4, 8])
    heads = heads_kv * rng.choice([1, 1, 2, 4, 8])
    scale = rng.choice([None, None, None, 0.5 / math.sqrt(head_dim), 1.0 / head_dim])
    mask = rng.choice(["none", "causal", "causal", "window", "causal_window"])
    window = (-1, -1)
    if mask == "window":
        window = (rng.choice([-1, rng.randint(0, 300)]), rng.choice([-1, rng.randint(0, 60)]))
    elif mask == "causal_window":
        window = (rng.randint(0, 300), -1)
    softcap = rng.uniform(2, 50) if FOCUS.get("softcap") else rng.choice([0.0, 0.0, 0.0, rng.uniform(2, 50)])
    return dict(dtype=dtype, head_dim=head_dim, heads=heads, heads_kv=heads_kv, scale=scale,
                causal=mask.startswith("causal"), window_size=window, softcap=softcap)


def left_right(c):
    left, right = c["window_size"]
    return left, 0 if c["causal"] else right


def slopes_for(rng, c, batch, device):
    if rng.random() < 0.7:
        return None
    shape = rng.choice([(c["heads"],), (batch, c["heads"])])
    return (torch.rand(shape, device=device) * 0.25).float()


def per_sequence(slopes, batch):
    return None if slopes is None else (slopes if slopes.dim() == 2 else slopes.expand(batch, -1))


def check_forward_and_backward(run, qs, ks, vs, c, slopes, grad_wanted, lse_wanted):
    """run(q, k, v) -> (out list, lse list or None); checks them (and dq, dk, dv where
    grad_wanted) against the references. Returns complaints."""
    scale = c["scale"] or 1.0 / math.sqrt(c["head_dim"])
    left, right = left_right(c)
    complaints = []
    leaves = [[t.detach().clone().requires_grad_(grad_wanted) for t in ts] for ts in (qs, ks, vs)]
    out, lse = run(*leaves)
    ex_leaves = [[t.detach().double().requires_grad_(grad_wanted) for t in ts] for ts in (qs, ks, vs)]
    lo_leaves = [[t.detach().clone().requires_grad_(grad_wanted) for t in ts] for ts in (qs, ks, vs)]
    exact, exact_lse = sequences_reference(*ex_leaves, scale, left, right, c["softcap"], slopes, torch.float64)
    low, low_lse = sequences_reference(*lo_leaves, scale, left, right, c["softcap"], slopes, c["dtype"])
    floor = 1e-5 if c["dtype"] == torch.float16 else 1e-4
    for name, a, e, lo in (("out", torch.cat(out), torch.cat(exact), torch.cat(low)),):
        if (why := allowed(a, e, lo, floor)):
            complaints.append(f"{name}: {why}")
    if lse_wanted and lse is not None and (why := lse_complaint(torch.cat(lse, -1), torch.cat(exact_lse, -1),
                                                                torch.cat(low_lse, -1), c["softcap"])):
        complaints.append(f"lse: {why}")
    if grad_wanted:
        grad = [torch.randn_like(o) for o in out]
        torch.autograd.backward(out, grad)
        torch.autograd.backward(exact, [g.double() for g in grad])
        torch.autograd.backward(low, grad)
        for name, idx in (("dq", 0), ("dk", 1), ("dv", 2)):
            a, e, lo = (torch.cat([t.grad for t in ls[idx]]) for ls in (leaves, ex_leaves, lo_leaves))
            if (why := allowed(a, e, lo, 10 * floor)):
                complaints.append(f"{name}: {why}")
    return complaints


def call_func(rng, device):
    c = draw_common(rng)
    batch = rng.randint(1, 4)
    seqlen_kv = rng.choice([rng.randint(1, 40), rng.randint(1, 700), rng.randint(700, 2500)])
    seqlen_q = rng.choice([seqlen_kv, rng.randint(1, 700)])
    grad = rng.random() < 0.35
    lse_wanted = rng.random() < 0.3
    q = torch.randn(batch, seqlen_q, c["heads"], c["head_dim"], device=device, dtype=c["dtype"])
    k = torch.randn(batch, seqlen_kv, c["heads_kv"], c["head_dim"], device=device, dtype=c["dtype"])
    v = torch.randn_like(k)
    slopes = slopes_for(rng, c, batch, device)
    options = dict(softmax_scale=c["scale"], causal=c["causal"], window_size=c["window_size"], softcap=c["softcap"],
                   alibi_slopes=slopes)

    def run(qs, ks, vs, strict):
        qq, kk, vv = (torch.stack(t) for t in (qs, ks, vs))
        out, lse = fmha.flash_attn_func(qq, kk, vv, return_lse=True, strict=strict, **options)
        return list(out), list(lse)

    describe = (f"flash_attn_func b{batch} sq{seqlen_q} sk{seqlen_kv} h{c['heads']}/{c['heads_kv']} d{c['head_dim']} "
                f"{str(c['dtype'])[6:]} causal={c['causal']} window={c['window_size']} softcap={c['softcap']:.1f} "
                f"alibi={None if slopes is None else tuple(slopes.shape)} scale={c['scale']} grad={grad}")
    return describe, run, (list(q), list(k), list(v)), c, per_sequence(slopes, batch), grad, lse_wanted


def call_varlen(rng, device):
    c = draw_common(rng)
    batch = rng.randint(1, 12)
    long = rng.randint(1, 3000)
    lens_k = [rng.choice([0, 1, rng.randint(1, 64), rng.randint(1, long)]) for _ in range(batch)]
    same = rng.random() < 0.5
    lens_q = [n if same else rng.choice([0, 1, rng.randint(1, max(1, n))]) for n in lens_k]
    paged = rng.random() < 0.35
    page = rng.choice([16, 32, 64, 128, 256])
    grad = not paged and rng.random() < 0.35
    lse_wanted = rng.random() < 0.3
    qs = [torch.randn(n, c["heads"], c["head_dim"], device=device, dtype=c["dtype"]) for n in lens_q]
    ks = [torch.randn(n, c["heads_kv"], c["head_dim"], device=device, dtype=c["dtype"]) for n in lens_k]
    vs = [torch.randn_like(k) for k in ks]
    slopes = slopes_for(rng, c, batch, device)
    cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=device)
    options = dict(softmax_scale=c["scale"], causal=c["causal"], window_size=c["window_size"], softcap=c["softcap"],
                   alibi_slopes=slopes)

    def run(qs, ks, vs, strict):
        q = torch.cat(qs)
        if paged:  # each sequence's keys in its own pages, the pages shuffled in the cache
            blocks = max(1, max(-(-n // page) for n in lens_k))
            order = torch.randperm(batch * blocks + 3, device=device)
            table = order[:batch * blocks].view(batch, blocks).int()
            k_cache = torch.randn(batch * blocks + 3, page, c["heads_kv"], c["head_dim"], device=device, dtype=c["dtype"])
            v_cache = torch.randn_like(k_cache)
            for b in range(batch):
                for cache, seq in ((k_cache, ks[b]), (v_cache, vs[b])):
                    for start in range(0, lens_k[b], page):
                        cache[table[b, start // page], :min(page, lens_k[b] - start)] = seq[start:start + page].detach()
            k, v, extra = k_cache, v_cache, dict(block_table=table)
        else:
            k, v, extra = torch.cat(ks), torch.cat(vs), {}
        out, lse = fmha.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), max(lens_q), max(lens_k),
                                               return_lse=True, strict=strict, **options, **extra)
        outs = list(out.split(lens_q))
        lses = list(lse.split(lens_q, dim=-1))
        return outs, lses

    describe = (f"flash_attn_varlen_func lens_q={lens_q} lens_k={lens_k} h{c['heads']}/{c['heads_kv']} d{c['head_dim']} "
                f"{str(c['dtype'])[6:]} causal={c['causal']} window={c['window_size']} softcap={c['softcap']:.1f} "
                f"alibi={None if slopes is None else tuple(slopes.shape)} scale={c['scale']} "
                f"paged={page if paged else None} grad={grad}")
    return describe, run, (qs, ks, vs), c, per_sequence(slopes, batch), grad, lse_wanted


def rotate(x, cos, sin, positions, interleaved):
    """FlashAttention's rotary embedding of x [n, heads, d] at `positions`, in float64."""
    rd = cos.shape[1] * 2
    cos, sin = cos[positions].double()[:, None, :], sin[positions].double()[:, None, :]
    x = x.double().clone()
    if interleaved:
        a, b = x[..., 0:rd:2].clone(), x[..., 1:rd:2].clone()
        x[..., 0:rd:2], x[..., 1:rd:2] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., :rd // 2].clone(), x[..., rd // 2:rd].clone()
        x[..., :rd // 2], x[..., rd // 2:rd] = a * cos - b * sin, a * sin + b * cos
    return x


def call_kvcache(rng, device):
    """Checked here rather than through check_forward_and_backward: the cache's contents after
    the call are checked too."""
    c = draw_common(rng)
    batch = rng.randint(1, 8)
    capacity = rng.choice([rng.randint(1, 64), rng.randint(64, 2048)])
    seqlen_new = rng.choice([0, 0, 1, rng.randint(1, 16)]) if capacity > 16 else 0
    seqlen_q = rng.choice([1, 1, seqlen_new or 1, rng.randint(1, 16)])
    paged = rng.random() < 0.4
    page = rng.choice([16, 32, 64, 128, 256])
    if paged:
        blocks = -(-capacity // page)
        capacity = blocks * page
    lens = [rng.randint(0 if seqlen_new else 1, capacity - seqlen_new) for _ in range(batch)]
    as_int = rng.random() < 0.2
    if as_int:
        lens = [lens[0]] * batch
    rotary = seqlen_new > 0 and rng.random() < 0.4
    interleaved = rng.random() < 0.5
    rd = min(c["head_dim"], rng.choice([16, 32, 64, 128])) // 16 * 16 if c["head_dim"] >= 16 else 0
    rotary = rotary and rd > 0
    batch_idx = not paged and rng.random() < 0.3
    cache_rows = batch + (2 if batch_idx else 0)
    dt, hk, d = c["dtype"], c["heads_kv"], c["head_dim"]
    q = torch.randn(batch, seqlen_q, c["heads"], d, device=device, dtype=dt)
    k_new = torch.randn(batch, seqlen_new, hk, d, device=device, dtype=dt) if seqlen_new else None
    v_new = torch.randn_like(k_new) if seqlen_new else None
    rows = torch.randperm(cache_rows, device=device)[:batch].int() if batch_idx else torch.arange(batch, device=device).int()
    if paged:
        order = torch.randperm(batch * blocks + 2, device=device)
        table = order[:batch * blocks].view(batch, blocks).int()
        k_cache = torch.randn(batch * blocks + 2, page, hk, d, device=device, dtype=dt)
        logical = lambda cache, b: cache[table[b].long()].reshape(capacity, hk, d)
    else:
        k_cache = torch.randn(cache_rows, capacity, hk, d, device=device, dtype=dt)
        logical = lambda cache, b: cache[rows[b].long()]
    v_cache = torch.randn_like(k_cache)
    slopes = slopes_for(rng, c, batch, device)
    cos = sin = None
    if rotary:
        angle = torch.rand(capacity + seqlen_q, rd // 2, device=device) * 2 * math.pi  # rows for every query position
        cos, sin = angle.cos().to(dt), angle.sin().to(dt)
    # The expected cache rows and attention, from copies made before the call.
    keys_before = [logical(k_cache, b).clone() for b in range(batch)]
    values_before = [logical(v_cache, b).clone() for b in range(batch)]
    scale = c["scale"] or 1.0 / math.sqrt(d)
    left, right = left_right(c)
    local = (0 <= left < capacity) or (0 <= right < capacity) or c["causal"]
    qs, ks, vs, new_keys = [], [], [], []
    for b in range(batch):
        n = lens[b]
        k_b, v_b, q_b = keys_before[b][:n].double(), values_before[b][:n].double(), q[b].double()
        if seqlen_new:
            kn = k_new[b]
            if rotary:
                kn = rotate(kn, cos, sin, torch.arange(n, n + seqlen_new, device=device), interleaved)
                qpos = torch.arange(n, n + seqlen_q, device=device) if local else torch.full((seqlen_q,), n, device=device)
                q_b = rotate(q[b], cos, sin, qpos, interleaved)
            new_keys.append(kn)
            k_b, v_b = torch.cat([k_b, kn.double()]), torch.cat([v_b, v_new[b].double()])
        qs.append(q_b), ks.append(k_b), vs.append(v_b)
    per_seq = per_sequence(slopes, batch)
    exact, exact_lse = sequences_reference(qs, ks, vs, scale, left, right, c["softcap"], per_seq, torch.float64)
    low, low_lse = sequences_reference([t.to(dt) for t in qs], [t.to(dt) for t in ks], [t.to(dt) for t in vs], scale,
                                       left, right, c["softcap"], per_seq, dt)
    options = dict(k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens[0] if as_int else
                   torch.tensor(lens, dtype=torch.int32, device=device), cache_batch_idx=rows if batch_idx else None,
                   block_table=table if paged else None, softmax_scale=c["scale"], causal=c["causal"],
                   window_size=c["window_size"], softcap=c["softcap"], rotary_interleaved=interleaved, alibi_slopes=slopes,
                   return_softmax_lse=True)
    describe = (f"flash_attn_with_kvcache b{batch} sq{seqlen_q} cap{capacity} lens={lens}{' (int)' if as_int else ''} "
                f"new{seqlen_new} h{c['heads']}/{hk} d{d} {str(dt)[6:]} causal={c['causal']} window={c['window_size']} "
                f"softcap={c['softcap']:.1f} alibi={None if slopes is None else tuple(slopes.shape)} scale={c['scale']} "
                f"rotary={(rd, interleaved) if rotary else None} batch_idx={batch_idx} paged={page if paged else None}")

    def run(strict):
        kc, vc = k_cache.clone(), v_cache.clone()
        out, lse = fmha.flash_attn_with_kvcache(q, kc, vc, strict=strict, **options)
        complaints = []
        floor = 1e-5 if dt == torch.float16 else 1e-4
        if (why := allowed(torch.cat(list(out)), torch.cat(exact), torch.cat(low), floor)):
            complaints.append(f"out: {why}")
        if (why := lse_complaint(lse, torch.stack(exact_lse), torch.stack(low_lse), c["softcap"])):
            complaints.append(f"lse: {why}")
        for b in range(batch):  # the appended rows hold the (rotated) new tokens; no other row changed
            n = lens[b]
            for name, cache, before, new in (("k_cache", kc, keys_before, new_keys[b] if seqlen_new else None),
                                             ("v_cache", vc, values_before, v_new[b] if seqlen_new else None)):
                after = logical(cache, b)
                if not torch.equal(after[:n], before[b][:n]) or not torch.equal(after[n + seqlen_new:], before[b][n + seqlen_new:]):
                    complaints.append(f"{name}: rows outside the appended ones changed (sequence {b})")
                elif seqlen_new and (after[n:n + seqlen_new].double() - new.double()).abs().max().item() > \
                        (2e-3 if dt == torch.float16 else 1.6e-2) * max(1.0, new.double().abs().max().item()):
                    complaints.append(f"{name}: appended rows differ from the new tokens (sequence {b})")
        return complaints

    return describe, run


def one_call(rng, device):
    kind = rng.choice(["func", "varlen", "varlen", "kvcache", "kvcache"])
    if kind == "kvcache":
        describe, run = call_kvcache(rng, device)
        attempt = lambda strict: run(strict)
    else:
        describe, run, tensors, c, slopes, grad, lse_wanted = (call_func if kind == "func" else call_varlen)(rng, device)
        attempt = lambda strict: check_forward_and_backward(lambda q, k, v: run(q, k, v, strict), *tensors, c, slopes, grad,
                                                           lse_wanted)
    try:
        try:
            return describe, "kernel", attempt(True)
        except fmha.UnsupportedError as refusal:
            served = f"fallback ({str(refusal).splitlines()[0][:80]})"
        return describe, served, attempt(False)
    except Exception as error:  # the API raised on a call it should take
        return describe, "raised", [f"{type(error).__name__}: {error}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtype", choices=["fp16", "bf16"], help="draw only this dtype")
    parser.add_argument("--softcap", action="store_true", help="draw only softcapped calls")
    args = parser.parse_args()
    FOCUS.update(dtype={"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.dtype), softcap=args.softcap)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    counts = {"kernel": 0, "fallback": 0, "failed": 0, "raised": 0}
    end = time.time() + args.seconds
    while time.time() < end:
        describe, served, complaints = one_call(rng, device)
        counts[served if served in counts else "fallback"] += 1
        if served == "raised":
            print(f"RAISED {describe}: {complaints[0]}", flush=True)
        elif complaints:
            counts["failed"] += 1
            print(f"FAILED [{served}] {describe}: {'; '.join(complaints)}", flush=True)
    print(f"{sum(counts.values()) - counts['failed']} calls: {counts}", flush=True)
    return 1 if counts["failed"] or counts["raised"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
