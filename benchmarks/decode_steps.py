#!/usr/bin/env python3
"""Decode steps through the Python API, as a serving loop calls them (a benchmark, not a test).

Parts (--part, default all):
  steps  fmha.flash_attn_with_kvcache against SDPA's cuDNN, flash and efficient backends on the
         same filled cache, every call timed as a CUDA-graph replay: bf16 d128 over batch
         {1, 4, 16, 64, 128} x keys {1k, 4k, 16k, 64k} x GQA {32/8, 64/8, 32/32, 8/1} (where the
         cache fits), then fp16 and d64/d256 on batch {1, 16} x keys {1k, 16k}. Beside each
         contiguous point, fmha on a paged copy of the cache (pages of 16 and 64, shuffled).
  short  the short-key grid: keys 1..16 x query rows per KV head 1..16 (MHA 16/16 with seqlen_q
         1..16, GQA 32/8 with seqlen_q 1..4, MQA 16/1 with seqlen_q 1) x head_dim 64/128/256 x
         fp16/bf16, each at a batch that moves at least 256 MB, as a fraction of copy speed.
  empty  one empty kernel per graph node: the launch cost every step pays.

--cold: each call of a graph reads its own copy of the point's q and cache, enough copies to
pass three times the L2 cache (and at least as many calls a graph), so that every backend's call
reads K and V from DRAM as a model's layers do; without it a cache smaller than L2 is read from
L2 by the replays after the first (docs/decisions.md, "Decode: one wide block an item").

fmha's calls pass causal=True (bottom-right: a step's one query sees every key; seqlen_q > 1
in the short grid is causal among the new tokens); the peers, with one query, need no mask.
Bytes are what must move: K and V once per KV head, Q and O once per query head; "of copy" is
against bench.py's copy measurement. Peers read the
same cache through strided [b, h, s, d] views; GQA through enable_gqa, else (a backend that
refuses it) through an expanded copy made beforehand, which the table marks with "x".

    python3 benchmarks/decode_steps.py [--part steps|short|empty|all] [--out FILE.md] [--quick]
                                       [--points B,KEYS,HQ,HKV[,D] ...] [--cold]
"""
import argparse
import contextlib
import datetime
import itertools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parent.parent / "python"))  # in-tree, unless installed
import fmha  # noqa: E402
from bench import copy_bandwidth_gbps  # noqa: E402  (benchmarks/bench.py: one way to measure the copy)
from python_overhead import gpu_us  # noqa: E402

CALLS = 10        # calls per captured graph
REPLAYS = 3       # timed replays; the median is reported
ROUNDS = 2        # the steps part times every variant of a point once a round, in turn; the best is reported
CACHE_LIMIT = 24 << 30  # bytes of K and V a point may allocate (peers' expanded copies come on top)


def graph_us(call, calls=CALLS, replays=REPLAYS):
    """Microseconds per call, as a CUDA-graph replay (python_overhead.gpu_us)."""
    return gpu_us(call, calls, replays)


def rotating(calls):
    """One callable that runs the given calls in turn (one per copy of a point's tensors)."""
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def paged(cache, page):
    """(pages [blocks, page, h, d], block_table [b, blocks per sequence]): the cache's rows in
    shuffled pages."""
    batch, capacity = cache.shape[:2]
    per_seq = capacity // page
    order = torch.randperm(batch * per_seq, device=cache.device)
    pages = torch.empty((batch * per_seq, page) + tuple(cache.shape[2:]), dtype=cache.dtype, device=cache.device)
    pages[order] = cache.reshape((batch * per_seq, page) + tuple(cache.shape[2:]))
    return pages, order.view(batch, per_seq).int()


def sdpa_call(backend, q, k_cache, v_cache):
    """(call, mark) of SDPA with one backend on [b, h, s, d] views; None where it refuses."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    chosen = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k_cache, v_cache))
    ratio = qh.shape[1] // kh.shape[1]
    forms = [("", lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=ratio > 1))]
    if ratio > 1 and 2 * k_cache.numel() * k_cache.element_size() * ratio <= CACHE_LIMIT:
        ke, ve = (t.repeat_interleave(ratio, dim=1) for t in (kh, vh))
        forms.append(("x", lambda: F.scaled_dot_product_attention(qh, ke, ve)))
    for mark, form in forms:
        def call(form=form):
            with sdpa_kernel(chosen):
                return form()
        try:
            with warnings_off():
                call()
            torch.cuda.synchronize()
            return call, mark
        except RuntimeError:
            continue
    return None, ""


@contextlib.contextmanager
def warnings_off():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def step_points(quick, chosen=None):
    """(dtype, head_dim, batch, keys, heads_q, heads_kv) of the steps part: chosen ones (bf16,
    d128 unless a point names its head_dim), a few (quick), or the grid."""
    if chosen:
        yield from ((torch.bfloat16, point[4] if len(point) > 4 else 128) + point[:4] for point in chosen)
        return
    if quick:
        yield from ((torch.bfloat16, 128, b, s, 32, 8) for b, s in ((1, 1024), (1, 16384), (8, 2048), (64, 8192)))
        return
    for batch in (1, 4, 16, 64, 128):
        for keys in (1024, 4096, 16384, 65536):
            for heads_q, heads_kv in ((32, 8), (64, 8), (32, 32), (8, 1)):
                yield torch.bfloat16, 128, batch, keys, heads_q, heads_kv
    for dtype, head_dim in ((torch.float16, 128), (torch.bfloat16, 64), (torch.bfloat16, 256)):
        for batch in (1, 16):
            for keys in (1024, 16384):
                yield dtype, head_dim, batch, keys, 32, 8


def steps(copy, quick, emit, chosen=None, peers=True, cold=False):
    emit("| dtype | d | batch | keys | GQA | fmha us | paged 16 | paged 64 | cuDNN | flash | efficient "
            "| fmha / best | paged / contiguous | of copy |", "|" + "---|" * 14)
    for dtype, head_dim, batch, keys, heads_q, heads_kv in step_points(quick, chosen):
        cache_bytes = 2 * batch * keys * heads_kv * head_dim * 2
        if cache_bytes > CACHE_LIMIT:
            continue
        make = dict(dtype=dtype, device="cuda")
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        copies = min(-(-3 * l2 // cache_bytes), CACHE_LIMIT // cache_bytes) if cold else 1
        calls = max(CALLS, copies)
        q = torch.randn(batch, 1, heads_q, head_dim, **make)
        k_cache, v_cache = (torch.randn(batch, keys, heads_kv, head_dim, **make) for _ in range(2))
        lengths = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
        # --cold: the copies (the first is the tensors above) that each call of a graph reads in turn
        tensors = [(q, k_cache, v_cache)] + [tuple(t.clone() for t in (q, k_cache, v_cache)) for _ in range(copies - 1)]
        step = rotating([lambda q=q, k=k, v=v: fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, causal=True,
                                                                             strict=True) for q, k, v in tensors])
        # Every variant once a round, the order reversed in every other round, the best of the
        # rounds: a measurement right after a long one (the efficient backend's expanded copies)
        # can read 10% high, which a fixed order charges to one variant (docs/decisions.md, "The
        # steps grid in rounds"). Paged copies are made per round (memory).
        def paged_call(page):
            def one(q, k_cache, v_cache):
                k_pages, table = paged(k_cache, page)
                v_pages = torch.empty_like(k_pages)
                v_pages[table.flatten().long()] = v_cache.reshape(k_pages.shape)
                return lambda: fmha.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths,
                                                            block_table=table, causal=True, strict=True)
            return rotating([one(*t) for t in tensors])
        variants = [("ours", lambda: step), ("paged 16", lambda: paged_call(16)), ("paged 64", lambda: paged_call(64))]
        marks = {}
        for backend in ("cudnn", "flash", "efficient") if peers else ():
            def peer(backend=backend):
                made = [sdpa_call(backend, *t) for t in tensors]
                marks[backend] = made[0][1]
                return rotating([call for call, _ in made]) if all(call for call, _ in made) else None
            variants.append((backend, peer))
        us = {}
        for round in range(ROUNDS):
            for label, make_call in variants[::-1] if round % 2 else variants:
                call = make_call()
                if call is not None:
                    us[label] = min(us.get(label, float("inf")), graph_us(call, calls))
                del call
        ours, pages = us["ours"], [us["paged 16"], us["paged 64"]]
        timed = [(us.get(backend), marks.get(backend, "")) for backend in ("cudnn", "flash", "efficient") if peers]
        best = min((t for t, _ in timed if t), default=None)
        moved = cache_bytes + 2 * q.numel() * q.element_size()
        name = "bf16" if dtype == torch.bfloat16 else "fp16"
        cells = [f"{t:.1f}{m}" if t else "-" for t, m in timed] + ["-"] * (3 - len(timed))
        emit(f"| {name} | {head_dim} | {batch} | {keys} | {heads_q}/{heads_kv} | {ours:.1f} | {pages[0]:.1f} | "
             f"{pages[1]:.1f} | {' | '.join(cells)} | {best / ours if best else 0:.2f} | "
             f"{max(pages) / ours:.3f} | {moved / ours / 1e3 / copy:.2f} |")
        q = k_cache = v_cache = tensors = step = None
        torch.cuda.empty_cache()


def short_grid(copy, quick, emit, head_dims=(64, 128, 256)):
    emit("| dtype | d | heads | seqlen_q | rows per KV head | " + " | ".join(f"{k}" for k in range(1, 17)) + " |",
         "|" + "---|" * 21)
    worst = (2.0, "")
    for dtype in (torch.float16, torch.bfloat16):
        for head_dim in head_dims:
            for heads_q, heads_kv, seqlens in ((16, 16, range(1, 17)), (32, 8, range(1, 5)), (16, 1, (1,))):
                for seqlen_q in seqlens:
                    if quick and seqlen_q not in (1, 2):
                        continue
                    cells = []
                    for keys in range(1, 17):
                        per_seq = 2 * keys * heads_kv * head_dim * 2 + 2 * seqlen_q * heads_q * head_dim * 2
                        batch = -(-(256 << 20) // per_seq)
                        make = dict(dtype=dtype, device="cuda")
                        q = torch.randn(batch, seqlen_q, heads_q, head_dim, **make)
                        k, v = (torch.randn(batch, keys, heads_kv, head_dim, **make) for _ in range(2))
                        us = graph_us(lambda: fmha.flash_attn_with_kvcache(q, k, v, causal=True, strict=True), calls=5,
                                      replays=3)
                        fraction = batch * per_seq / us / 1e3 / copy
                        cells.append(f"{fraction:.2f}")
                        name = f"{'bf16' if dtype == torch.bfloat16 else 'fp16'} d{head_dim} {heads_q}/{heads_kv} " \
                               f"s_q {seqlen_q} keys {keys}"
                        worst = min(worst, (fraction, name))
                        q = k = v = None
                    emit(f"| {'bf16' if dtype == torch.bfloat16 else 'fp16'} | {head_dim} | {heads_q}/{heads_kv} "
                         f"| {seqlen_q} | {heads_q // heads_kv * seqlen_q} | " + " | ".join(cells) + " |")
        torch.cuda.empty_cache()
    emit("", f"Lowest point: {worst[0]:.2f} of copy ({worst[1]}).")


def empty(copy, quick, emit):
    emit(f"One empty kernel per graph node: {graph_us(lambda: torch.cuda._sleep(0)):.2f} us.")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("steps", "short", "empty", "all"), default="all")
    parser.add_argument("--out", help="also write the Markdown tables here")
    parser.add_argument("--quick", action="store_true", help="a few points of each part")
    parser.add_argument("--no-peers", action="store_true", help="the steps part without SDPA")
    parser.add_argument("--points", nargs="+", metavar="B,KEYS,HQ,HKV[,D]",
                        help="the steps part at these bf16 points only (d128 unless D), e.g. 1,65536,8,1")
    parser.add_argument("--head-dims", nargs="+", type=int, default=(64, 128, 256), choices=(64, 128, 256),
                        help="the short part at these head dims only")
    parser.add_argument("--cold", action="store_true",
                        help="the steps part with every call on its own copy of the cache (read from DRAM)")
    options = parser.parse_args()
    torch.manual_seed(0)
    copy = copy_bandwidth_gbps()
    lines = [f"Device: {torch.cuda.get_device_name()}; PyTorch {torch.__version__}; "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; copy {copy:.0f} GB/s; "
             f"graphs of {CALLS} calls (--cold: at least one per copy), median of {REPLAYS} replays; "
             f"command: {' '.join(sys.argv)}", ""]
    print("\n".join(lines), flush=True)

    def emit(*new):  # prints, and rewrites --out after every row: a cut-off run keeps what it measured
        lines.extend(new)
        print("\n".join(new), flush=True)
        if options.out:
            Path(options.out).write_text("\n".join(lines) + "\n")

    for part in ("empty", "steps", "short") if options.part == "all" else (options.part,):
        emit(f"### {part}", "")
        if part == "steps":
            steps(copy, options.quick, emit, [tuple(map(int, p.split(","))) for p in options.points or []],
                  not options.no_peers, options.cold)
        elif part == "short":
            short_grid(copy, options.quick, emit, options.head_dims)
        else:
            empty(copy, options.quick, emit)
        emit("")


if __name__ == "__main__":
    main()
