"""The catalogue: which kernel config tuples exist, their names, and their validity.

A kernel's name lists every field of its tuple in a fixed order, with tokens unique across
fields, e.g. fmha_fwd_fp16_d256_mha_nomask_prefill_gfx942, after its direction (fwd or bwd: a
fact of its family, so a family is either forward or backward). That name is the file name, the
launcher symbol, the kernel-table key, fmha.exe's -kernel value and the test id. Its grammar
lives here only: the C++ side takes each kernel's name from its generated table row.
"""
import collections
import fnmatch
import itertools
import re
from dataclasses import dataclass, fields, replace

from .archs import ARCHS

NAME_PREFIX = "fmha"
DIRECTIONS = ("fwd", "bwd")  # forward kernels (FwdParams, kernel_table) and backward ones (BwdParams, bwd_kernel_table)
TOKEN_PREFIXES = {"head_dim": "d"}  # a field's token is its value after this prefix (e.g. d256)

DTYPES = ("fp16", "bf16")
HEADS_KINDS = ("mha", "gqa", "mqa")
MASKS = ("nomask", "causal")


@dataclass(frozen=True)
class Family:
    """A kernel family and the tuples it offers; the rest of the product it declines."""
    name: str
    head_dim_multiple: int    # e.g. 16-byte vector loads of 2-byte elements, or MMA k steps
    max_head_dim: int         # register/shared-memory budget (src/kernels/<family>.h traits)
    description: str
    matrix_cores: tuple = ()  # matrix instruction sets (archs.MATRIX_CORES) it runs on; () = any arch
    # (matrix core, largest head_dim) where its loop there takes less than max_head_dim, and why.
    core_head_dim_limits: tuple = ()
    # Its kernels also serve smaller head_dims (multiples of 8): columns past the problem's are
    # zeros in the loads and left out of the stores, so a d128 kernel runs d80.
    serves_smaller_head_dims: bool = False
    # ... and any smaller head_dim, whose rows are not 16-byte vectors (59, 111): read and
    # written element by element (docs/design.md, "Element rows").
    serves_element_rows: bool = False
    direction: str = "fwd"    # DIRECTIONS: the name's prefix, the params struct and the table it goes in
    heads_kinds: tuple = HEADS_KINDS  # a gqa kernel runs every group size: a family may build only it
    deterministic_loop: bool = False  # backward: it has a deterministic main loop (setup.py --deterministic-backward)
    # The family whose calls it serves where that one has no main loop: built for an arch where
    # that one runs only when a selection names it (setup.py --only --families ...).
    fallback_for: str = ""
    # Its kernels' head_dims are powers of two (the backward's preprocess reduces a row over
    # head_dim / 8 lanes of one warp by shuffles: mmabwd/workspace.h); others run on the next
    # larger kernel where it serves smaller head_dims.
    power_of_two_head_dims: bool = False

    def takes_head_dim(self, head_dim):
        return (0 < head_dim <= self.max_head_dim and head_dim % self.head_dim_multiple == 0 and
                (not self.power_of_two_head_dims or head_dim & (head_dim - 1) == 0))

    @property
    def core_head_dim_limit(self):
        """(matrix core, largest head_dim) where its loop takes less than max_head_dim, or
        ("none", max_head_dim): the generated HeadDimRule holds one such core."""
        assert len(self.core_head_dim_limits) <= 1, f"{self.name}: HeadDimRule holds one core's limit"
        return tuple(self.core_head_dim_limits[0][:2]) if self.core_head_dim_limits else ("none", self.max_head_dim)

    @property
    def head_dim_rule(self):
        if self.power_of_two_head_dims:
            return f"a power of two from {self.head_dim_multiple} up to {self.max_head_dim}"
        return f"a multiple of {self.head_dim_multiple} up to {self.max_head_dim}"

    def runs_on(self, arch):
        """Whether the family has a main loop for the arch's matrix core."""
        return not self.matrix_cores or ARCHS[arch].matrix_core in self.matrix_cores

    def declines(self, config):
        """Returns (field, value, why) for each field of the tuple this family does not offer."""
        reasons = []
        if not self.takes_head_dim(config.head_dim):
            reasons.append(("head_dim", config.head_dim, f"needs {self.head_dim_rule}"))
        if config.heads not in self.heads_kinds:
            reasons.append(("heads", config.heads, f"builds {', '.join(self.heads_kinds)} only, "
                                                   "which runs every group size"))
        if config.arch in ARCHS and not self.runs_on(config.arch):
            reasons.append(("arch", config.arch, f"needs matrix core {' or '.join(self.matrix_cores)}; "
                                                 f"no main loop for {ARCHS[config.arch].matrix_core} yet"))
        for core, limit, why in self.core_head_dim_limits:
            if config.arch in ARCHS and ARCHS[config.arch].matrix_core == core and config.head_dim > limit:
                reasons.append(("head_dim", config.head_dim, f"at most {limit} on {core} ({why})"))
        return reasons


FAMILIES = {
    f.name: f
    for f in (
        Family("prefill", 8, 256,
               "tiled, any seqlen_q/seqlen_kv; the correct fallback for every shape", serves_smaller_head_dims=True),
        Family("decode", 8, 256,
               "bandwidth-bound, for few query rows per KV head: streams K/V once per KV head "
               "with 16-byte loads, splitting long key ranges across warps and blocks"),
        Family("mmaprefill", 16, 256,
               "tiled on the matrix cores (Hopper: wgmma fed by TMA, warp-specialised; CDNA: MFMA, "
               "K/V through LDS), for many query rows per KV head", matrix_cores=("wgmma", "mfma"),
               serves_smaller_head_dims=True, serves_element_rows=True,
               # its tile scheduler maps query heads to KV heads at run time: mha and mqa
               # instances would be the same machine code, compiled twice more
               heads_kinds=("gqa",)),
        # The backward: FlashAttention-2's order on wgmma (Hopper; mma.sync elsewhere; MFMA on
        # CDNA up to d128, where simtbwd serves d256).
        Family("mmabwd", 64, 256,
               "backward on the matrix cores (Hopper: wgmma fed by TMA; CDNA: MFMA): a block owns a key tile, walks "
               "the query tiles that see it, keeps dK and dV in registers and adds dQ into an fp32 workspace",
               matrix_cores=("wgmma", "mma_sync", "mfma"), direction="bwd", heads_kinds=("gqa",), deterministic_loop=True,
               serves_smaller_head_dims=True, power_of_two_head_dims=True,
               core_head_dim_limits=(("mfma", 128, "dK and dV of d256 would fill a lane's registers"),)),
        Family("simtbwd", 64, 256,
               "backward on the CUDA cores, any arch: mmabwd's order and workspace with plain arithmetic; "
               "the fallback where no matrix-core loop serves",
               direction="bwd", heads_kinds=("gqa",), fallback_for="mmabwd", serves_smaller_head_dims=True,
               power_of_two_head_dims=True),
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
    def direction(self):
        return FAMILIES[self.family].direction

    @property
    def name(self):
        return "_".join([NAME_PREFIX, self.direction] + [TOKEN_PREFIXES.get(f.name, "") + str(getattr(self, f.name))
                                                        for f in fields(self)])

    @property
    def platform(self):
        return ARCHS[self.arch].platform

    @classmethod
    def from_name(cls, name):
        """The tuple of a catalogue name. Fields are matched against their known tokens, not
        split at underscores, so a token may hold one (e.g. a family "split_kv")."""
        found = name_pattern().fullmatch(name)
        if not found:
            expected = "_".join([NAME_PREFIX, "<direction>"] + [f"{TOKEN_PREFIXES.get(f.name, '')}<{f.name}>"
                                                                 for f in fields(cls)])
            raise ValueError(f"not a kernel name: {name!r} (expected {expected}, each a known token)")
        fields_found = found.groupdict()
        direction = fields_found.pop("direction")
        config = cls(**dict(fields_found, head_dim=int(found["head_dim"])))
        if config.direction != direction:
            raise ValueError(f"invalid kernel name {name!r}: family {config.family} is a {config.direction} family")
        problems = validate(config)
        if problems:
            raise ValueError(f"invalid kernel name {name!r}: " + "; ".join(problems))
        return config


def backward_families():
    """The backward families in order of preference: a fallback after the family it backs."""
    return sorted((f for f in FAMILIES.values() if f.direction == "bwd"), key=lambda f: bool(f.fallback_for))


def known_values():
    """The values each field other than head_dim may take."""
    return {"dtype": DTYPES, "heads": HEADS_KINDS, "mask": MASKS, "family": FAMILIES, "arch": ARCHS}


def name_pattern():
    """The name grammar as a regular expression, one named group per field, in field order."""
    patterns = {field: "|".join(map(re.escape, values)) for field, values in known_values().items()}
    patterns["head_dim"] = "[1-9][0-9]*"
    return re.compile("_".join([re.escape(NAME_PREFIX), f"(?P<direction>{'|'.join(DIRECTIONS)})"] + [
        f"{re.escape(TOKEN_PREFIXES.get(f.name, ''))}(?P<{f.name}>{patterns[f.name]})" for f in fields(KernelConfig)]))


def offered(family, arch):
    """Whether the named family has kernels for the named arch."""
    return FAMILIES[family].runs_on(arch)


def unknown_values(config):
    """Returns the reasons some field of the tuple is not a catalogue value at all."""
    problems = []
    for field, allowed in known_values().items():
        value = getattr(config, field)
        if value not in allowed:
            problems.append(f"unknown {field} {value!r} (known: {', '.join(allowed)})")
    return problems


def validate(config):
    """Returns the reasons this tuple cannot be built (empty when it can)."""
    problems = unknown_values(config)
    family = FAMILIES.get(config.family)
    if family and not problems:
        problems += [f"{field} {value} not supported by the {family.name} family ({why})"
                     for field, value, why in family.declines(config)]
    return problems


@dataclass
class Selection:
    """What a set of axes gives: the tuples built, and per family what it skipped and why."""
    configs: list
    skipped: dict  # family -> {(field, why): set of values}

    def skip_notes(self):
        """One line per family and reason, e.g. 'mmaprefill skips arch gfx908, gfx90a (...)'."""
        notes = []
        for family, reasons in sorted(self.skipped.items()):
            for (field, why), values in sorted(reasons.items()):
                listed = ", ".join(str(v) for v in sorted(values))
                notes.append(f"{family} skips {field} {listed} ({why})")
        return notes


def fallback_skip(config, named_families):
    """Why a fallback family's tuple is left out of a selection that does not name the family
    (the family it backs builds the same tuple), or None."""
    backed = FAMILIES[config.family].fallback_for
    if backed and config.family not in named_families and not FAMILIES[backed].declines(replace(config, family=backed)):
        return ("arch", config.arch, f"{backed} serves it; a selection naming {config.family} builds it")
    return None


def select(axes, name_glob="*", named_families=()):
    """The catalogue of the cartesian product of axes, names matching name_glob.

    A tuple that its family declines (an arch without the family's matrix core, a head_dim it
    does not build) is skipped and noted; an unknown value, or a value of an axis that no family
    offers in any tuple (e.g. --head-dims 100), raises ValueError: nothing asked for is dropped
    silently. A fallback family's tuple that the family it backs builds too is skipped and noted
    unless named_families names it.
    """
    order = [f.name for f in fields(KernelConfig)]
    configs, unknown, offered = [], set(), collections.defaultdict(set)
    why_not = collections.defaultdict(dict)  # (field, value) -> {family: why}
    skipped = collections.defaultdict(lambda: collections.defaultdict(set))
    for values in itertools.product(*(axes[field] for field in order)):
        config = KernelConfig(*values)
        problems = unknown_values(config)
        if problems:
            unknown.update(problems)
            continue
        declined = FAMILIES[config.family].declines(config)
        for field, value, why in declined:
            why_not[(field, value)][config.family] = why
        if not declined:  # buildable, though a fallback family may leave it out of this selection
            for field in order:
                offered[field].add(getattr(config, field))
            fallback = fallback_skip(config, named_families)
            declined = [fallback] if fallback else []
        if not declined:
            if fnmatch.fnmatchcase(config.name, name_glob):
                configs.append(config)
        elif fnmatch.fnmatchcase(config.name, name_glob):
            for field, value, why in declined:
                skipped[config.family][(field, why)].add(value)
    unknown_values_named = {line.split(" (")[0] for line in unknown}  # e.g. "unknown arch 'gfx1100'"
    # A value no family declined is unbuilt only because of another axis's value, which is listed.
    unbuildable = [f"{field} {value}: no family offers it (" +
                   "; ".join(f"{family}: {why}" for family, why in sorted(why_not[(field, value)].items())) + ")"
                   for field in order for value in axes[field]
                   if value not in offered[field] and why_not[(field, value)]
                   and f"unknown {field} {value!r}" not in unknown_values_named]
    problems = sorted(unknown) + unbuildable
    if problems:  # every invalid value, each once; one line when there is one
        raise ValueError("invalid configs:" + ("\n  " if len(problems) > 1 else " ") + "\n  ".join(problems))
    return Selection(sorted(configs), {f: dict(r) for f, r in skipped.items()})


def enumerate_configs(axes, name_glob="*"):
    """The tuples select() builds (ValueError for values that cannot be built)."""
    return select(axes, name_glob).configs
