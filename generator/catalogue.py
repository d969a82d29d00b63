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

    def takes_head_dim(self, head_dim):
        return 0 < head_dim <= self.max_head_dim and head_dim % self.head_dim_multiple == 0

    @property
    def head_dim_rule(self):
        return f"a multiple of {self.head_dim_multiple} up to {self.max_head_dim}"


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


KNOWN_VALUES = {"dtype": DTYPES, "heads": HEADS_KINDS, "mask": MASKS, "family": FAMILIES, "arch": ARCHS}


def offered(family, arch):
    """Whether the family has a main loop for the arch's matrix core (tuples it has none for are
    not built, and are no error)."""
    family, arch = FAMILIES.get(family), ARCHS.get(arch)
    return not (family and arch and family.matrix_cores and arch.matrix_core not in family.matrix_cores)


def selected_families(axes):
    """The families of the axes that run on one of the axes' archs."""
    return [FAMILIES[name] for name in axes["family"]
            if name in FAMILIES and any(offered(name, arch) for arch in axes["arch"])]


def head_dim_rules(families):
    """The families' head_dim rules in words, families of one rule together."""
    names_by_rule = {}
    for family in families:
        names_by_rule.setdefault(family.head_dim_rule, []).append(family.name)
    return "; ".join(f"{', '.join(names)}: {rule}" for rule, names in names_by_rule.items())


def axis_problems(axes):
    """What cannot be built among the axes' values: one line per invalid value (empty when all can).
    A head_dim is invalid when no family of the axes takes it; the families that do not take a
    valid one skip it (skipped_head_dims says which)."""
    problems = []
    for field, known in KNOWN_VALUES.items():
        problems += [f"unknown {field} {value!r} (known: {', '.join(known)})"
                     for value in axes[field] if value not in known]
    families = selected_families(axes)
    for head_dim in axes["head_dim"]:
        if families and not any(family.takes_head_dim(head_dim) for family in families):
            problems.append(f"head_dim {head_dim} not supported ({head_dim_rules(families)})")
    return problems


def skipped_head_dims(axes):
    """Lines naming each family of the axes that skips a head_dim of the axes, and its rule."""
    return [f"{family.name} skips head_dim {head_dim} (it takes {family.head_dim_rule})"
            for family in selected_families(axes) for head_dim in axes["head_dim"]
            if not family.takes_head_dim(head_dim)]


def validate(config):
    """Returns the reasons this tuple cannot be built (empty when it can)."""
    return axis_problems({f.name: (getattr(config, f.name),) for f in fields(KernelConfig)})


def enumerate_configs(axes, name_glob="*"):
    """Every tuple of the cartesian product of axes that is built (its family runs on its arch and
    takes its head_dim) and whose name matches name_glob.

    Raises ValueError naming each invalid value once, so a bad --head-dims is never dropped silently.
    """
    problems = axis_problems(axes)
    if problems:
        raise ValueError("invalid values:\n  " + "\n  ".join(problems))
    order = [f.name for f in fields(KernelConfig)]
    configs = [KernelConfig(*values) for values in itertools.product(*(axes[field] for field in order))]
    return sorted(c for c in configs if offered(c.family, c.arch) and FAMILIES[c.family].takes_head_dim(c.head_dim)
                  and fnmatch.fnmatchcase(c.name, name_glob))
