#!/usr/bin/env python3
"""How much of FlashAttention's forward test grid the catalogue's kernels serve (a report, not
a test): a seeded sample of the parameter grids of FlashAttention 2's forward tests
(tests/test_flash_attn.py: output, varlen output, qkv-packed, causal with swapped lengths, the
KV cache with appended keys, rotary, pages, left padding), each case called through this
package's API in strict mode. A case is served when the call returns; refused when it raises
UnsupportedError, counted by its reason (numbers written as N); an error is anything else (a
case FlashAttention takes that the API rejects). Outputs are not checked here: the tests do that.
--backward: the tests that check gradients (all but the KV cache's), each served forward call's
gradients taken too, under FMHA_STRICT=1: served when a backward kernel computed them.

    python3 benchmarks/fa_grid_coverage.py [--cases 400] [--seed 0] [--backward] [--out report.md]

--cases is per test; needs a CUDA GPU and a build of the library (PYTHONPATH=python).
"""
import argparse
import collections
import datetime
import itertools
import math
import os
import random
import re
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

HEAD_DIMS = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
KVCACHE_HEAD_DIMS = [32, 59, 64, 80, 128, 256]
PAIRS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
         (1024, 1023), (2048, 2048)]
CAUSAL_PAIRS = [(1, 239), (3, 799), (127, 512), (127, 513), (113, 203), (128, 217), (113, 211), (108, 256),
                (256, 512), (1023, 1024)]
KVCACHE_PAIRS = [(1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048), (16, 20000), (128, 128)]
GRADIENT_TESTS = ("output", "varlen_output", "qkvpacked", "causal")  # FlashAttention checks their gradients
HEADS = {"mha": 9, "gqa": 3, "mqa": 1}  # KV heads beside 9 query heads (the cache test: 6, 3, 1 beside 6)

# Each test's axes; a case is one value per axis.
GRIDS = {
    "output": dict(kvpacked=[True, False], dtype=["float16", "bfloat16"], mha=list(HEADS), alibi=[False, True],
                   local=[False, True], causal=[False, True], d=HEAD_DIMS, pair=PAIRS, dropout=[0.0, 0.17],
                   softcap=[0.0, 50.0]),
    "varlen_output": dict(kvpacked=[True, False], dtype=["float16", "bfloat16"], mha=list(HEADS), alibi=[False, True],
                          local=[False, True], causal=[False, True], d=HEAD_DIMS, pair=PAIRS, dropout=[0.0, 0.17],
                          softcap=[0.0, 50.0]),
    "qkvpacked": dict(dtype=["float16", "bfloat16"], alibi=[False, True], local=[False, True], causal=[False, True],
                      d=HEAD_DIMS, seqlen=[97, 128, 200, 384, 768, 1024, 1025, 2048], dropout=[0.0, 0.17]),
    "causal": dict(dtype=["float16", "bfloat16"], local=[False, True], d=HEAD_DIMS, pair=CAUSAL_PAIRS,
                   swap=[False, True]),
    "kvcache": dict(mha=list(HEADS), new_kv=[False, True], alibi=[False, True], local=[False, True],
                    causal=[False, True], new_eq_q=[True, False], interleaved=[False, True],
                    rotary=[0.0, 0.5, 1.0], page=[None, 256], leftpad=[False, True], d=KVCACHE_HEAD_DIMS,
                    pair=KVCACHE_PAIRS),
}


def valid(test, c):
    """The combinations FlashAttention's tests skip."""
    if c.get("softcap", 0.0) > 0 and c.get("dropout", 0.0) > 0:
        return False
    if test == "kvcache":
        seqlen_q, seqlen_k = c["pair"]
        return not ((seqlen_q > seqlen_k and c["new_kv"]) or (not c["new_kv"] and c["rotary"] > 0)
                    or (c["leftpad"] and c["page"] is not None))
    return True


def sample(test, count, rng):
    axes = GRIDS[test]
    names, values = list(axes), list(axes.values())
    total = math.prod(len(v) for v in values)
    chosen, tries = [], 0
    while len(chosen) < count and tries < 50 * count:
        tries += 1
        index = rng.randrange(total)
        case = {}
        for name, options in zip(names, values):
            index, i = divmod(index, len(options))
            case[name] = options[i]
        if valid(test, case):
            chosen.append(case)
    return chosen


def run_case(test, c, rng, grad=False):
    """The case's output (of tensors that require grad with grad=True)."""
    import torch
    import fmha
    dev = "cuda"
    dtype = getattr(torch, c.get("dtype", "float16"))
    rand = lambda *shape: torch.randn(*shape, device=dev, dtype=dtype).requires_grad_(grad)  # noqa: E731
    heads = 6 if test == "kvcache" else 9
    heads_kv = {"mha": heads, "gqa": 3, "mqa": 1}[c.get("mha", "mha")]
    d = c["d"]
    if test == "qkvpacked":
        seqlen_q = seqlen_k = c["seqlen"]
    elif test == "causal":
        seqlen_q, seqlen_k = c["pair"][::-1] if c["swap"] else c["pair"]
    else:
        seqlen_q, seqlen_k = c["pair"]
    causal = c.get("causal", test == "causal")
    window = (-1, -1) if not c["local"] else tuple(rng.randrange(seqlen_k) for _ in range(2))
    batch = 2 if test == "kvcache" else 4
    slopes = torch.rand(batch, heads, device=dev) * 0.3 if c.get("alibi") else None
    options = dict(causal=causal, window_size=window, alibi_slopes=slopes, strict=True)
    if test != "kvcache":
        options.update(dropout_p=c.get("dropout", 0.0), softcap=c.get("softcap", 0.0))
    if test in ("output", "causal"):
        q, k, v = rand(batch, seqlen_q, heads, d), rand(batch, seqlen_k, heads_kv, d), rand(batch, seqlen_k, heads_kv, d)
        if c.get("kvpacked"):
            return fmha.flash_attn_kvpacked_func(q, torch.stack([k, v], dim=2), **options)
        return fmha.flash_attn_func(q, k, v, **options)
    if test == "qkvpacked":
        return fmha.flash_attn_qkvpacked_func(rand(batch, seqlen_q, 3, heads, d), **options)
    if test == "varlen_output":  # random lengths, as a padding mask would leave them
        lengths_q = [rng.randint(max(1, seqlen_q // 2), seqlen_q) for _ in range(batch)]
        lengths_k = [rng.randint(max(1, seqlen_k // 2), seqlen_k) for _ in range(batch)]
        cu = lambda n: torch.tensor([0] + list(itertools.accumulate(n)), device=dev, dtype=torch.int32)  # noqa: E731
        q, k, v = rand(sum(lengths_q), heads, d), rand(sum(lengths_k), heads_kv, d), rand(sum(lengths_k), heads_kv, d)
        args = (cu(lengths_q), cu(lengths_k), max(lengths_q), max(lengths_k))
        if c["kvpacked"]:
            return fmha.flash_attn_varlen_kvpacked_func(q, torch.stack([k, v], dim=1), *args, **options)
        return fmha.flash_attn_varlen_func(q, k, v, *args, **options)
    # kvcache: a cache of seqlen_k slots, cache_seqlens filled, new keys appended, rotary on them
    seqlen_new = seqlen_q if c["new_eq_q"] else rng.randint(1, seqlen_q)
    rotary_dim = math.floor(int(c["rotary"] * d) / 16) * 16
    q = rand(batch, seqlen_q, heads, d)
    k = rand(batch, seqlen_new, heads_kv, d) if c["new_kv"] else None
    v = rand(batch, seqlen_new, heads_kv, d) if c["new_kv"] else None
    room = seqlen_k - (seqlen_q if (causal or c["local"]) and rotary_dim > 1 else seqlen_new) + 1 if c["new_kv"] else seqlen_k + 1
    filled = torch.tensor([rng.randrange(0 if c["new_kv"] else 1, room) for _ in range(batch)], device=dev,
                          dtype=torch.int32)
    leftpad = None
    if c["leftpad"]:
        leftpad = torch.tensor([rng.randrange(int(n)) if int(n) > 0 else 0 for n in filled], device=dev, dtype=torch.int32)
    block_table = None
    if c["page"] is None:
        k_cache, v_cache = rand(batch, seqlen_k, heads_kv, d), rand(batch, seqlen_k, heads_kv, d)
    else:
        pages_per_seq = math.ceil(seqlen_k / c["page"])
        blocks = batch * pages_per_seq * 3
        k_cache, v_cache = rand(blocks, c["page"], heads_kv, d), rand(blocks, c["page"], heads_kv, d)
        block_table = torch.randperm(blocks, device=dev, dtype=torch.int32)[:batch * pages_per_seq].view(batch, -1)
    cos = sin = None
    if rotary_dim > 0:
        rows = seqlen_k if c["page"] is None else k_cache.shape[0] * c["page"]
        angle = torch.rand(rows, rotary_dim // 2, device=dev) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
    return fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=filled,
                                        cache_leftpad=leftpad, block_table=block_table, causal=causal,
                                        window_size=window, rotary_interleaved=c["interleaved"], alibi_slopes=slopes,
                                        strict=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=400, help="sampled cases per test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backward", action="store_true", help="the gradients' coverage (FMHA_STRICT=1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.backward:
        os.environ["FMHA_STRICT"] = "1"  # a backward without a kernel raises instead of recomputing
    import torch
    import fmha
    rng = random.Random(args.seed)
    tests = GRADIENT_TESTS if args.backward else tuple(GRIDS)
    counts = {test: collections.Counter() for test in tests}
    reasons = collections.Counter()
    errors = collections.Counter()
    for test in tests:
        for case in sample(test, args.cases, rng):
            try:
                out = run_case(test, case, rng, grad=args.backward)
                if args.backward:
                    out.backward(torch.randn_like(out))
                counts[test]["served"] += 1
            except fmha.UnsupportedError as e:
                counts[test]["refused"] += 1
                reason = re.sub(r"\b\d+(?:\.\d+)?\b", "N", str(e).split("serves this call (", 1)[-1].rstrip(")"))
                reasons[reason] += 1
            except Exception as e:  # noqa: BLE001 - an API error on a case FlashAttention takes
                counts[test]["error"] += 1
                errors[type(e).__name__ + ": " + re.sub(r"\b\d+\b", "N", str(e))[:160]] += 1
            torch.cuda.synchronize()
    total = sum(sum(c.values()) for c in counts.values())
    served = sum(c["served"] for c in counts.values())
    direction = "backward" if args.backward else "forward"
    lines = [f"FlashAttention {direction} grid coverage, {torch.cuda.get_device_name()} ({socket.gethostname()}), "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; `python3 benchmarks/fa_grid_coverage.py "
             f"--cases {args.cases} --seed {args.seed}{' --backward' if args.backward else ''}`", "",
             f"Served by the kernels: {served} of {total} sampled valid cases ({100.0 * served / max(total, 1):.1f}%).", "",
             "| test | cases | served | refused | API errors |", "|---|---|---|---|---|"]
    for test, c in counts.items():
        lines.append(f"| {test} | {sum(c.values())} | {c['served']} | {c['refused']} | {c['error']} |")
    lines += ["", "| refused because (numbers as N) | cases |", "|---|---|"]
    lines += [f"| {reason} | {n} |" for reason, n in reasons.most_common()]
    if errors:
        lines += ["", "| API error | cases |", "|---|---|"] + [f"| {e} | {n} |" for e, n in errors.most_common()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
