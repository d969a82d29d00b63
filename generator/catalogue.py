"""The catalogue: which kernel config tuples exist, their names, and their validity.

A kernel's name lists every field of its tuple in a fixed order, with tokens unique across
fields, e.g. fmha_fwd_fp16_d256_mha_nomask_prefill_gfx942. That name is the file name, the
launcher symbol, the kernel-table key, fmha.exe's -kernel value and the test id.
"""
import fnmatch
import itertools
from dataclasses import dataclass, fields

from .archs import ARCHS

NAME_PREFIX = "fmha_fwd"

DTYPES = ("fp16", "bf16")
HEADS_KINDS = ("mha", "gqa", "mqa")
MASKS = ("nomask", "causal")


@dataclass(frozen=True)
class Family:
    name: str
    head_dim_multiple: int    # 16-byte vector loads of 2-byte elements
    max_head_dim: int         # register/shared-memory budget (src/kernels/<family>.h traits)
    description: str
    matrix_cores: tuple = ()  # the archs' matrix instruction sets it has a main loop for; () = any arch


FAMILIES = {
    f.name: f
    for f in (
        Family("prefill", 8, 256,
               "tiled, any seqlen_q/seqlen_kv; the correct fallback for every shape"),
        Family("decode", 8, 256,
               "bandwidth-bound, for few query rows per KV head: streams K/V once per KV head "
               "with 16-byte loads, splitting long key ranges across warps and blocks"),
        Family("mmaprefill", 16, 256,
               "tiled on the matrix cores (Hopper: wgmma fed by TMA, warp-specialised), for many "
               "query rows per KV head", matrix_cores=("wgmma",)),
    )
}

DEFAULT_AXES = {
    "dtype": DTYPES,
    "head_dim": (64, 128, 256),
    "heads": HEADS_KINDS,
    "mask": MASKS,
    "family": tuple(FAMILIES),
    "arch": tuple(ARCHS),
}


@dataclass(frozen=True, order=True)
class KernelConfig:
    """One config tuple; field order is the order of the tokens in the name."""
    dtype: str
    head_dim: int
    heads: str
    mask: str
    family: str
    arch: str

    @property
    def name(self):
        return "_".join((NAME_PREFIX, self.dtype, f"d{self.head_dim}", self.heads,
                         self.mask, self.family, self.arch))

    @property
    def platform(self):
        return ARCHS[self.arch].platform

    @classmethod
    def from_name(cls, name):
        prefix = NAME_PREFIX + "_"
        tokens = name[len(prefix):].split("_") if name.startswith(prefix) else []
        if len(tokens) != len(fields(cls)) or not tokens[1][1:].isdigit() or tokens[1][0] != "d":
            raise ValueError(f"not a kernel name: {name!r} (expected {prefix}"
                             "<dtype>_d<head_dim>_<heads>_<mask>_<family>_<arch>)")
        dtype, head_dim, heads, mask, family, arch = tokens
        config = cls(dtype, int(head_dim[1:]), heads, mask, family, arch)
        problems = validate(config)
        if problems:
            raise ValueError(f"invalid kernel name {name!r}: " + "; ".join(problems))
        return config


def validate(config):
    """Returns the reasons this tuple cannot be built (empty when it can)."""
    problems = []
    for field, allowed in (("dtype", DTYPES), ("heads", HEADS_KINDS), ("mask", MASKS),
                           ("family", FAMILIES), ("arch", ARCHS)):
        value = getattr(config, field)
        if value not in allowed:
            problems.append(f"unknown {field} {value!r} (known: {', '.join(allowed)})")
    family = FAMILIES.get(config.family)
    if family:
        d = config.head_dim
        if d <= 0 or d % family.head_dim_multiple or d > family.max_head_dim:
            problems.append(f"head_dim {d} not supported by the {family.name} family (needs a "
                            f"multiple of {family.head_dim_multiple} up to {family.max_head_dim})")
    return problems


def offered(config):
    """Whether the family has a main loop for the arch's matrix core (tuples it has none for are
    not built, and are no error)."""
    family, arch = FAMILIES.get(config.family), ARCHS.get(config.arch)
    return not (family and arch and family.matrix_cores and arch.matrix_core not in family.matrix_cores)


def enumerate_configs(axes, name_glob="*"):
    """Every valid tuple of the cartesian product of axes whose name matches name_glob.

    Raises ValueError listing the invalid tuples, so a bad --head-dims is never dropped silently.
    """
    order = [f.name for f in fields(KernelConfig)]
    configs, invalid = [], []
    for values in itertools.product(*(axes[field] for field in order)):
        config = KernelConfig(*values)
        if not offered(config):
            continue
        problems = validate(config)
        if problems:
            invalid.append(f"{config.name}: {'; '.join(problems)}")
        elif fnmatch.fnmatchcase(config.name, name_glob):
            configs.append(config)
    if invalid:
        raise ValueError("invalid configs:\n  " + "\n  ".join(sorted(set(invalid))))
    return sorted(configs)
