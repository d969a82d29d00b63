"""flash_attn_with_kvcache's append, timed: a decode step with 1 new token (append, then
attention), the same step with rotary, and the step without new tokens (attention alone), each
captured in a CUDA graph and timed as the mean of its replays; bf16, GQA 32/8, d128, 4,096 keys
filled of a 8,192-key cache; batch 1 and 16. Also the GPU kernels one eager step runs
(torch.profiler). The package timed is the one `import fmha` finds: run it with PYTHONPATH at a
checkout's python/ to compare versions (docs/decisions.md, "Fused append and rotary").

    PYTHONPATH=python python3 benchmarks/kvcache_append.py
"""
import argparse

import torch

import fmha


def captured(step):
    """A CUDA graph of step(), warmed up on a side stream first as PyTorch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def replay_us(graph, replays):
    """Mean microseconds per replay."""
    for _ in range(20):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / replays


def kernels(run):
    """The GPU kernels (and copies) of one run(), by shortened name, as the profiler sees them."""
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        run()
        torch.cuda.synchronize()
    names = [e.name for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [name.split("(")[0].split("<")[0].replace("void ", "")[-32:] for name in names]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replays", type=int, default=500)
    args = parser.parse_args()
    heads, heads_kv, head_dim, filled, capacity = 32, 8, 128, 4096, 8192
    print(f"fmha from {fmha.__file__}; {torch.cuda.get_device_name()}")
    print("| batch | step | us per replay | kernels of a replay | of an eager step |")
    print("|---|---|---|---|---|")
    for batch in (1, 16):
        torch.manual_seed(0)
        q = torch.randn(batch, 1, heads, head_dim, dtype=torch.bfloat16, device="cuda")
        k_cache, v_cache = (torch.randn(batch, capacity, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda")
                            for _ in range(2))
        new_k, new_v = (torch.randn(batch, 1, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        lengths = torch.full((batch,), filled, dtype=torch.int32, device="cuda")
        lengths_after = lengths + 1
        angles = torch.rand(capacity, head_dim // 2, device="cuda") * 6.28
        cos, sin = angles.cos().bfloat16(), angles.sin().bfloat16()
        steps = {
            "attention only": lambda: fmha.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths_after),
            "append + attention": lambda: fmha.flash_attn_with_kvcache(q, k_cache, v_cache, new_k, new_v,
                                                                       cache_seqlens=lengths, causal=True),
            "append + rotary + attention": lambda: fmha.flash_attn_with_kvcache(
                q, k_cache, v_cache, new_k, new_v, cos, sin, cache_seqlens=lengths, causal=True),
        }
        for name, step in steps.items():
            try:
                step()
            except NotImplementedError as error:
                print(f"| {batch} | {name} | n/a ({error}) | | |")
                continue
            graph = captured(step)
            replayed, eager = kernels(graph.replay), kernels(step)
            print(f"| {batch} | {name} | {replay_us(graph, args.replays):.1f} | {len(replayed)}: {', '.join(replayed)} | "
                  f"{len(eager)} |")


if __name__ == "__main__":
    main()
