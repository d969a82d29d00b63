"""Facts about each target architecture: the one place they are written down.

The generator renders these into generated/fmha_catalogue.h so that C++ traits and the
runtime device matching read the same facts.
"""
from dataclasses import dataclass

# Matrix instruction sets, each with one header of fragment layouts under src/kernels/mma/:
#   none      no matrix unit the kernels use
#   mma_sync  NVIDIA warp-wide mma.sync m16n8k16 (sm_80 and later)
#   wgmma     NVIDIA warpgroup-wide asynchronous wgmma (sm_90a); these archs have mma_sync too
#   mfma      AMD CDNA matrix fused multiply-add (v_mfma_*), wave64
MATRIX_CORES = ("none", "mma_sync", "wgmma", "mfma")


@dataclass(frozen=True)
class Arch:
    name: str                 # token in kernel names, e.g. "gfx942"
    platform: str             # "amd" (hipcc) or "nvidia" (nvcc)
    wave_size: int            # hardware wavefront / warp width
    vector_bytes: int         # widest global load/store one lane issues (dwordx4 / LDG.128)
    matrix_core: str          # the matrix instruction set its tensor-core kernels use (MATRIX_CORES)
    compile_targets: tuple    # offload targets in preference order; the build takes the
                              # first one its compiler knows and says when it falls back
    device_names: tuple       # what the runtime reports for devices of this arch
    description: str


ARCHS = {
    a.name: a
    for a in (
        Arch("gfx908", "amd", 64, 16, "mfma", ("gfx908",), ("gfx908",), "AMD CDNA1 (MI100)"),
        Arch("gfx90a", "amd", 64, 16, "mfma", ("gfx90a",), ("gfx90a",), "AMD CDNA2 (MI210/MI250)"),
        # ROCm < 5.7 (Debian's 5.2) does not know gfx942; gfx940 is the same CDNA3 ISA.
        Arch("gfx942", "amd", 64, 16, "mfma", ("gfx942", "gfx940"), ("gfx942", "gfx940", "gfx941"),
             "AMD CDNA3 (MI300)"),
        Arch("sm90", "nvidia", 32, 16, "wgmma", ("sm_90a",), ("sm_90",), "NVIDIA Hopper (H100/H200)"),
    )
}

PLATFORMS = ("amd", "nvidia")
