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
#   wmma      AMD RDNA3 wave32 matrix multiply-accumulate (v_wmma_*); no family has a main loop
#             for it yet, so the tensor-core families skip those archs and the generator says so
MATRIX_CORES = ("none", "mma_sync", "wgmma", "mfma", "wmma")


@dataclass(frozen=True)
class Arch:
    name: str                 # token in kernel names, e.g. "gfx942"
    platform: str             # "amd" (hipcc) or "nvidia" (nvcc)
    wave_size: int            # hardware wavefront / warp width
    vector_bytes: int         # widest global load/store one lane issues (dwordx4 / LDG.128)
    matrix_core: str          # the matrix instruction set its tensor-core kernels use (MATRIX_CORES)
    shared_bytes: int         # most shared memory (LDS) one block may use
    compile_target: str       # the offload target: the build fails when its compiler lacks it
    device_names: tuple       # what the runtime reports for devices of this arch
    description: str


ARCHS = {
    a.name: a
    for a in (
        Arch("gfx908", "amd", 64, 16, "mfma", 64 * 1024, "gfx908", ("gfx908",), "AMD CDNA1 (MI100)"),
        Arch("gfx90a", "amd", 64, 16, "mfma", 64 * 1024, "gfx90a", ("gfx90a",), "AMD CDNA2 (MI210/MI250)"),
        # gfx942 needs ROCm >= 5.7 (LLVM 17): `make deps` sets one up where the system's is older.
        Arch("gfx942", "amd", 64, 16, "mfma", 64 * 1024, "gfx942", ("gfx942",), "AMD CDNA3 (MI300)"),
        # RDNA3 runs wave32 (its default in the compiler); a workgroup may use 64 KiB of LDS.
        Arch("gfx1100", "amd", 32, 16, "wmma", 64 * 1024, "gfx1100", ("gfx1100",),
             "AMD RDNA3 (Radeon RX 7900 XTX)"),
        Arch("sm90", "nvidia", 32, 16, "wgmma", 227 * 1024, "sm_90a", ("sm_90",), "NVIDIA Hopper (H100/H200)"),
    )
}

PLATFORMS = ("amd", "nvidia")
