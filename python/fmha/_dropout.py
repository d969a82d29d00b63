"""Dropout on the kernels (docs/decisions.md, "Dropout"): each call's Philox seed and offset,
int64 [seed, offset] on the device, drawn from PyTorch's CUDA generator by an ordinary random
op: reproducible under torch.manual_seed, and captured by CUDA graphs (a replay draws fresh
ones, as PyTorch's own dropout does). The forward kernel reads them from device memory, the
backward gets the same tensor and regenerates the mask. mask() writes that mask out (tests, and
the PyTorch fallbacks, whose dropout must be the kernels')."""
import torch

from . import _library


def seed_offset(device):
    """A fresh int64 [seed, offset] on device, from PyTorch's generator for it."""
    return torch.randint(-2**63, 2**63 - 1, (2,), dtype=torch.int64, device=device)


def usable(q):
    """Whether the kernels' dropout can serve a call on q's device (a CUDA tensor and the
    library), outside torch.compile, whose traces take PyTorch's dropout."""
    if not q.is_cuda or torch.compiler.is_compiling():
        return False
    try:
        _library.load()
    except OSError:
        return False
    return True


def mask(dropout_p, seed_offset, batch, heads, seqlen_q, seqlen_kv):
    """The kernels' keep mask for these seeds, bool [batch, heads, seqlen_q, seqlen_kv] (query
    row i, key j of a padded batch; True where kept)."""
    out = torch.empty((batch, heads, seqlen_q, seqlen_kv), dtype=torch.uint8, device=seed_offset.device)
    stream = torch.cuda.current_stream(seed_offset.device).cuda_stream
    _library.load().dropout_mask(dropout_p, seed_offset.data_ptr(), batch, heads, seqlen_q, seqlen_kv, out.data_ptr(),
                                 stream)
    return out.bool()
