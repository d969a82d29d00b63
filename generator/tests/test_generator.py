"""Tests of the generator: catalogue, names, validation, rendering, and the command line."""
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from generator import cli
from generator.archs import ARCHS, MATRIX_CORES
from generator import catalogue
from generator.catalogue import (DEFAULT_AXES, DTYPES, FAMILIES, HEADS_KINDS, MASKS, Family, KernelConfig,
                                 backward_families, enumerate_configs, offered, select, validate)
from generator.render import environment, render_all, write_all


def default_configs():
    return enumerate_configs(DEFAULT_AXES)


FORWARD_FAMILIES = [name for name, family in FAMILIES.items() if family.direction == "fwd"]


def forward_kernels(head_dims=3, archs=tuple(ARCHS)):
    """How many forward kernels fp16/bf16 x head_dims x both masks give: each family with its heads
    kinds, on the archs it has a main loop for."""
    return sum(2 * head_dims * len(FAMILIES[family].heads_kinds) * 2 * offered(family, arch)
               for family in FORWARD_FAMILIES for arch in archs)


def default_backward_kernels():
    """fp16/bf16 x d64/d128/d256 x gqa (every group size) x both masks on every arch: mmabwd's
    where it has a main loop for the head_dim, simtbwd's (its fallback) elsewhere."""
    return 2 * 3 * 1 * 2 * len(ARCHS)


def test_default_catalogue_is_the_product_of_what_each_family_runs_on():
    configs = default_configs()
    assert len(configs) == forward_kernels() + default_backward_kernels()
    mfma = {"gfx908", "gfx90a", "gfx942"}
    assert {c.arch for c in configs if c.family == "mmabwd"} == {"sm90"} | mfma
    assert {c.head_dim for c in configs if c.family == "mmabwd" and c.arch in mfma} == {64, 128}
    # simtbwd where mmabwd has no loop: gfx1100 (no MFMA), and d256 on the MFMA archs
    assert {(c.arch, c.head_dim) for c in configs if c.family == "simtbwd"} == \
        {("gfx1100", d) for d in (64, 128, 256)} | {(arch, 256) for arch in mfma}
    assert {c.head_dim for c in configs} == {64, 128, 256}
    assert {c.arch for c in configs} == {"gfx908", "gfx90a", "gfx942", "gfx1100", "sm90"}


def test_name_lists_every_field_in_order_and_round_trips():
    config = KernelConfig("fp16", 256, "mha", "nomask", "prefill", "gfx942")
    assert config.name == "fmha_fwd_fp16_d256_mha_nomask_prefill_gfx942"
    for config in default_configs():
        assert KernelConfig.from_name(config.name) == config


def test_a_token_may_hold_an_underscore(monkeypatch):
    """Names are matched against the known tokens, not split at underscores, and the C++ side
    takes each name from its table row: a family may be called split_kv."""
    family = Family("split_kv", 8, 256, "test family")
    monkeypatch.setitem(catalogue.FAMILIES, family.name, family)
    config = KernelConfig("fp16", 128, "gqa", "causal", "split_kv", "sm90")
    assert config.name == "fmha_fwd_fp16_d128_gqa_causal_split_kv_sm90"
    assert KernelConfig.from_name(config.name) == config
    table = render_all([config], {})["kernel_table_nvidia.cpp"]
    assert ("{DType::fp16, 128, HeadsKind::gqa, Mask::causal, Family::split_kv, Arch::sm90}, "
            "&fmha_fwd_fp16_d128_gqa_causal_split_kv_sm90, ") in table
    assert '_describe, "fmha_fwd_fp16_d128_gqa_causal_split_kv_sm90"},' in table


def test_backward_kernels_are_named_by_their_direction_and_go_in_their_own_table():
    config = KernelConfig("bf16", 128, "gqa", "causal", "mmabwd", "sm90")
    assert config.direction == "bwd" and config.name == "fmha_bwd_bf16_d128_gqa_causal_mmabwd_sm90"
    assert KernelConfig.from_name(config.name) == config
    with pytest.raises(ValueError, match="mmabwd is a bwd family"):
        KernelConfig.from_name("fmha_fwd_bf16_d128_gqa_causal_mmabwd_sm90")
    with pytest.raises(ValueError, match="prefill is a fwd family"):
        KernelConfig.from_name("fmha_bwd_bf16_d128_gqa_causal_prefill_sm90")
    forward = KernelConfig("bf16", 128, "gqa", "causal", "prefill", "sm90")
    files = render_all([config, forward], {})
    table = files["kernel_table_nvidia.cpp"]
    backward_table = table.split("bwd_kernel_table()")[1]
    assert "&fmha_bwd_bf16_d128_gqa_causal_mmabwd_sm90, " in backward_table
    assert "fmha_fwd_" not in backward_table and "mmabwd" not in table.split("bwd_kernel_table()")[0].split("kernel_table()")[1]
    assert "const BwdParams& params" in files[f"kernels/{config.name}.hip"]


def test_tokens_are_unique_across_fields():
    tokens = list(DTYPES) + list(HEADS_KINDS) + list(MASKS) + list(FAMILIES) + list(ARCHS)
    assert len(tokens) == len(set(tokens))
    assert not any(t.startswith("d") and t[1:].isdigit() for t in tokens)  # head_dim's form


@pytest.mark.parametrize("name", [
    "fmha_fwd_fp16_d256_mha_nomask_prefill",            # a field missing
    "fmha_fwd_fp32_d256_mha_nomask_prefill_gfx942",     # unknown dtype
    "fmha_fwd_fp16_d250_mha_nomask_prefill_gfx942",     # not a multiple of 8
    "fmha_fwd_fp16_256_mha_nomask_prefill_gfx942",      # head_dim without its d
    "fmha_fwd_fp16_d256_nomask_mha_prefill_gfx942",     # fields out of order
    "attn_fwd_fp16_d256_mha_nomask_prefill_gfx942",
])
def test_malformed_names_are_rejected(name):
    with pytest.raises(ValueError):
        KernelConfig.from_name(name)


def test_validation_explains_what_is_wrong():
    assert validate(KernelConfig("fp16", 96, "gqa", "causal", "prefill", "sm90")) == []
    assert "head_dim 100" in validate(KernelConfig("fp16", 100, "mha", "nomask", "prefill", "sm90"))[0]
    assert "head_dim 512" in validate(KernelConfig("fp16", 512, "mha", "nomask", "prefill", "sm90"))[0]
    assert "unknown arch" in validate(KernelConfig("fp16", 64, "mha", "nomask", "prefill", "gfx1030"))[0]


def test_invalid_added_values_are_an_error_not_dropped():
    axes = dict(DEFAULT_AXES, head_dim=(64, 100))
    with pytest.raises(ValueError, match="head_dim 100"):
        enumerate_configs(axes)


# The tensor-core prefill family needs a matrix core with a main loop (wgmma: sm90; MFMA: CDNA)
# and k steps of 16.
TENSOR_FAMILY = "mmaprefill"


def test_a_family_skips_archs_without_its_matrix_core():
    selection = select(DEFAULT_AXES)
    archs = {c.arch for c in selection.configs if c.family == TENSOR_FAMILY}
    assert archs == {a.name for a in ARCHS.values() if a.matrix_core in ("wgmma", "mfma")}
    assert archs == {"gfx908", "gfx90a", "gfx942", "sm90"}
    assert len([c for c in selection.configs if c.family == TENSOR_FAMILY]) == 4 * 2 * 3 * 1 * 2  # gqa only
    assert [n for n in selection.skip_notes() if n.startswith(TENSOR_FAMILY)] == [
        "mmaprefill skips arch gfx1100 (needs matrix core wgmma or mfma; no main loop for wmma yet)",
        "mmaprefill skips heads mha, mqa (builds gqa only, which runs every group size)"]
    with pytest.raises(ValueError, match="needs matrix core wgmma or mfma"):
        KernelConfig.from_name("fmha_fwd_fp16_d64_gqa_nomask_mmaprefill_gfx1100")
    for arch in ("gfx90a", "sm90"):
        assert validate(KernelConfig("fp16", 64, "gqa", "nomask", "mmaprefill", arch)) == []


def test_cdna_builds_the_mfma_prefill_family_beside_its_fallback():
    """gfx908, gfx90a and gfx942 (matrix core mfma) get every tuple of mmaprefill that sm90 gets,
    head dims a multiple of 16 included, and keep the CUDA-core prefill family as the fallback."""
    selection = select(dict(DEFAULT_AXES, head_dim=(64, 80, 128, 256)))
    tuples = collections.defaultdict(set)
    for c in selection.configs:
        tuples[(c.family, c.arch)].add((c.dtype, c.head_dim, c.heads, c.mask))
    for arch in ("gfx908", "gfx90a", "gfx942"):
        assert ARCHS[arch].matrix_core == "mfma"
        assert tuples[(TENSOR_FAMILY, arch)] == tuples[(TENSOR_FAMILY, "sm90")]
        assert tuples[("prefill", arch)] >= tuples[(TENSOR_FAMILY, arch)]
    assert {head_dim for _, head_dim, _, _ in tuples[(TENSOR_FAMILY, "gfx942")]} == {64, 80, 128, 256}
    assert (TENSOR_FAMILY, "gfx1100") not in tuples


def test_rdna3_builds_the_cuda_core_families_at_wave32():
    """gfx1100: wave32, no MFMA (WMMA), so decode, prefill and simtbwd only, compiled as gfx1100 itself."""
    rdna3 = ARCHS["gfx1100"]
    assert (rdna3.platform, rdna3.wave_size, rdna3.matrix_core, rdna3.compile_target) == ("amd", 32, "wmma", "gfx1100")
    families = {c.family for c in select(DEFAULT_AXES).configs if c.arch == "gfx1100"}
    assert families == {"decode", "prefill", "simtbwd"}
    # No stand-in targets: each arch compiles for itself.
    assert all(a.compile_target == a.name for a in ARCHS.values() if a.platform == "amd")


def test_a_family_may_name_several_matrix_cores(monkeypatch):
    both = Family("tensortest", 16, 256, "test family", matrix_cores=("wgmma", "mfma", "wmma"))
    monkeypatch.setitem(catalogue.FAMILIES, both.name, both)
    selection = select(dict(DEFAULT_AXES, family=(both.name,)))
    assert {c.arch for c in selection.configs} == set(ARCHS) and selection.skip_notes() == []


def test_a_head_dim_some_family_builds_is_skipped_by_the_others():
    selection = select(dict(DEFAULT_AXES, head_dim=(64, 72), arch=("sm90",)))
    assert {c.family for c in selection.configs if c.head_dim == 72} == {"prefill", "decode"}
    assert {c.family for c in selection.configs if c.head_dim == 64} == {"prefill", "decode", "mmaprefill", "mmabwd"}
    assert selection.skip_notes() == ["mmabwd skips head_dim 72 (needs a power of two from 64 up to 256)",
                                      "mmabwd skips heads mha, mqa (builds gqa only, which runs every group size)",
                                      "mmaprefill skips head_dim 72 (needs a multiple of 16 up to 256)",
                                      "mmaprefill skips heads mha, mqa (builds gqa only, which runs every group size)",
                                      "simtbwd skips arch sm90 (mmabwd serves it; a selection naming simtbwd builds it)",
                                      "simtbwd skips head_dim 72 (needs a power of two from 64 up to 256)",
                                      "simtbwd skips heads mha, mqa (builds gqa only, which runs every group size)"]


def test_a_fallback_family_is_built_where_the_family_it_backs_runs_only_when_named():
    """simtbwd serves the backward on archs without mmabwd's loop; on sm90 only a selection that
    names it builds it (setup.py --only --families simtbwd ...)."""
    axes = dict(DEFAULT_AXES, family=("simtbwd",), heads=("gqa",), arch=("sm90", "gfx942"))
    assert {c.arch for c in select(axes).configs} == {"gfx942"}
    assert {c.arch for c in select(axes, named_families=("simtbwd",)).configs} == {"sm90", "gfx942"}
    assert not any(c.family == "simtbwd" and c.arch == "sm90" for c in select(DEFAULT_AXES).configs)


@pytest.mark.parametrize("axes, message", [
    (dict(head_dim=(64, 100)), "head_dim 100: no family offers it (decode: needs a multiple of 8 up to 256; "
                               "mmabwd: needs a power of two from 64 up to 256; mmaprefill: needs a multiple of 16 up to 256; prefill: needs a multiple of 8"),
    (dict(family=("mmaprefill",), head_dim=(64, 72)), "head_dim 72: no family offers it (mmaprefill: "),
    (dict(family=("mmaprefill",), arch=("gfx1100", "sm90")),
     "arch gfx1100: no family offers it (mmaprefill: needs matrix core wgmma or mfma; no main loop for wmma yet)"),
])
def test_a_value_no_family_builds_is_an_error(axes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        select(dict(DEFAULT_AXES, **axes))


def test_cli_says_which_families_skip_what(tmp_path, capsys):
    assert cli.main(["--families", "mmaprefill", "--out", str(tmp_path)]) == 0
    assert "mmaprefill skips arch gfx1100 (needs matrix core wgmma or mfma" in capsys.readouterr().out
    assert cli.main(["--families", "mmaprefill", "--list", "--out", str(tmp_path)]) == 0
    assert "mmaprefill skips arch gfx1100" in capsys.readouterr().err


def test_filter_glob():
    configs = enumerate_configs(DEFAULT_AXES, "*_fp16_d128_*_sm90")
    assert len(configs) == forward_kernels(head_dims=1, archs=("sm90",)) // 2 + 2  # fp16 only; + mmabwd's two masks
    assert all(c.dtype == "fp16" and c.head_dim == 128 and c.arch == "sm90" for c in configs)


def test_templates_fail_on_undefined_variables():
    env = environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("kernel.hip.j2").render()


def test_rendered_kernel_is_short_and_names_its_tuple():
    config = KernelConfig("bf16", 128, "gqa", "causal", "prefill", "gfx90a")
    files = render_all([config], {"add": {}, "only": False, "filter": "*"})
    source = files[f"kernels/{config.name}.hip"]
    assert f"hipError_t {config.name}(const FwdParams& params" in source
    assert "KernelConfig<DType::bf16, 128, HeadsKind::gqa" in source
    assert "Mask::causal, Arch::gfx90a>" in source
    assert "#define" not in source
    assert len(source.splitlines()) < 25
    table = files["kernel_table_amd.cpp"]
    assert f'&{config.name}, &{config.name}_workspace, &{config.name}_describe, "{config.name}"}}' in table
    assert config.name not in files["kernel_table_nvidia.cpp"]


def test_arch_facts_reach_the_header_in_enum_order():
    header = render_all(default_configs(), {"add": {}, "only": False, "filter": "*"})["fmha_catalogue.h"]
    rows = [line.strip() for line in header.splitlines() if line.strip().startswith("{ Platform::")]
    assert len(rows) == len(ARCHS)
    for row, arch in zip(rows, ARCHS.values()):
        assert arch.matrix_core in MATRIX_CORES
        assert row.startswith(f"{{ Platform::{arch.platform}, {arch.wave_size}, {arch.vector_bytes}, "
                              f"MatrixCore::{arch.matrix_core}, ")


def test_backward_families_reach_the_header_fallbacks_last():
    header = render_all(default_configs(), {"add": {}, "only": False, "filter": "*"})["fmha_catalogue.h"]
    names = [f.name for f in backward_families()]
    assert sorted(names) == sorted(n for n, f in FAMILIES.items() if f.direction == "bwd")
    for name in names:  # a fallback comes after the family it backs
        backed = FAMILIES[name].fallback_for
        assert not backed or names.index(backed) < names.index(name)
    assert ("kBackwardFamilies[] = { " + ", ".join(f"Family::{n}" for n in names) + " };") in header


def test_writes_only_changed_files_and_removes_stale_kernels(tmp_path):
    selection = {"add": {}, "only": False, "filter": "*"}
    configs = enumerate_configs(DEFAULT_AXES, "*_fp16_d64_*")
    written, removed = write_all(tmp_path, configs, selection)
    assert written == len(render_all(configs, selection)) and removed == 0
    assert write_all(tmp_path, configs, selection) == (0, 0)
    fewer = [c for c in configs if c.arch == "sm90"]
    written, removed = write_all(tmp_path, fewer, selection)
    assert removed == len(configs) - len(fewer)
    assert sorted(p.stem for p in (tmp_path / "kernels").glob("*.hip")) == sorted(c.name for c in fewer)


def test_cli_list_writes_nothing(tmp_path, capsys):
    assert cli.main(["--list", "--out", str(tmp_path)]) == 0
    assert len(capsys.readouterr().out.split()) == len(default_configs())
    assert list(tmp_path.iterdir()) == []


def test_cli_adds_a_head_dim_and_refresh_keeps_it(tmp_path, capsys):
    out = str(tmp_path)
    assert cli.main(["--head-dims", "96", "--out", out]) == 0
    names = {p.stem for p in (tmp_path / "kernels").glob("*.hip")}
    assert len(names) == len(default_configs()) + forward_kernels(head_dims=1)
    assert "fmha_fwd_fp16_d96_gqa_causal_prefill_sm90" in names
    assert json.loads((tmp_path / "selection.json").read_text())["add"] == {"head_dim": [96]}
    assert cli.main(["--refresh", "--out", out]) == 0
    assert {p.stem for p in (tmp_path / "kernels").glob("*.hip")} == names
    assert '"head_dim": [96]' in (tmp_path / "kernel_table_nvidia.cpp").read_text()


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_either_command_renders_the_same_bytes(tmp_path, capsys):
    """`setup.py ...` then `setup.py --refresh` (what make runs) rewrites nothing."""
    argv = ["--only", "--head-dims", "64", "--dtypes", "fp16", "--archs", "sm90", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert cli.main(["--refresh", "--out", str(tmp_path)]) == 0
    assert "wrote 0 changed file(s)" in capsys.readouterr().out
    assert snapshot(tmp_path) == before


def test_adding_a_head_dim_changes_only_the_new_kernels_and_the_lists(tmp_path):
    """Kernel sources and the header they include stay byte-identical, so Ninja compiles only
    the new kernels and the table."""
    assert cli.main(["--only", "--head-dims", "64", "--heads", "mha", "--out", str(tmp_path)]) == 0
    before = snapshot(tmp_path)
    assert cli.main(["--refresh", "--head-dims", "96", "--out", str(tmp_path)]) == 0
    after = snapshot(tmp_path)
    changed = {path for path in after if before.get(path) != after[path]}
    added = {path for path in after if path not in before}
    assert added and all("_d96_" in path for path in added)
    assert changed - added == {"kernel_table_amd.cpp", "kernel_table_nvidia.cpp", "kernels.cmake", "selection.json"}
    assert json.loads(after["selection.json"])["add"]["head_dim"] == [64, 96]


def test_deterministic_backward_is_recorded_and_reaches_the_backward_kernels(tmp_path, capsys):
    out = ["--only", "--archs", "sm90", "--head-dims", "64", "--dtypes", "bf16", "--heads", "gqa", "--out", str(tmp_path)]
    kernel = tmp_path / "kernels" / "fmha_bwd_bf16_d64_gqa_causal_mmabwd_sm90.hip"
    assert cli.main(out) == 0  # the default: the deterministic loop beside the default one
    assert "launch<Config, /*kWithDeterministic=*/true>" in kernel.read_text()
    assert '"fmha_bwd_bf16_d64_gqa_causal_mmabwd_sm90", true}' in (tmp_path / "kernel_table_nvidia.cpp").read_text()
    assert cli.main(out + ["--no-deterministic-backward"]) == 0
    assert "launch<Config, /*kWithDeterministic=*/false>" in kernel.read_text()
    assert '"fmha_bwd_bf16_d64_gqa_causal_mmabwd_sm90", false}' in (tmp_path / "kernel_table_nvidia.cpp").read_text()
    assert cli.main(["--refresh", "--out", str(tmp_path)]) == 0  # kept by --refresh (what make runs)
    assert json.loads((tmp_path / "selection.json").read_text())["deterministic_backward"] is False
    assert cli.main(["--refresh", "--deterministic-backward", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "selection.json").read_text())["deterministic_backward"] is True
    assert cli.main(["--only", "--families", "prefill", "--out", str(tmp_path)]) == 0  # (no backward: nothing to add)
    assert cli.main(["--only", "--families", "prefill", "--deterministic-backward", "--out", str(tmp_path)]) == 2
    assert "the selection has no backward kernel" in capsys.readouterr().err


def test_refresh_keeps_the_recorded_only_and_filter(tmp_path, capsys):
    assert cli.main(["--refresh", "--only", "--out", str(tmp_path)]) == 2
    assert cli.main(["--refresh", "--filter", "*", "--out", str(tmp_path)]) == 2
    assert "leave out --refresh" in capsys.readouterr().err


def test_cli_only_replaces_the_defaults(tmp_path, capsys):
    assert cli.main(["--only", "--head-dims", "96", "--archs", "sm90", "--list", "--out", str(tmp_path)]) == 0
    names = capsys.readouterr().out.split()
    assert len(names) == forward_kernels(head_dims=1, archs=("sm90",)) and all("_d96_" in n and n.endswith("_sm90") for n in names)


@pytest.mark.parametrize("argv, message", [
    (["--head-dims", "100"], "head_dim 100"),
    (["--archs", "gfx1030"], "unknown arch"),
    (["--filter", "nothing*"], "no kernel matches"),
    (["--filter", ""], "--filter expects a non-empty glob"),
    (["--only", "--archs", "gfx1100", "--families", "mmaprefill", "--heads", "gqa"],
     "invalid configs: arch gfx1100: no family offers it (mmaprefill: needs matrix core"),
])
def test_cli_errors_exit_2_with_a_reason(tmp_path, capsys, argv, message):
    assert cli.main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err  # one line, naming the cause


def test_an_unwritable_out_folder_is_a_one_line_error(capsys):
    assert cli.main(["--only", "--archs", "sm90", "--head-dims", "64", "--out", "/proc/fmha-test"]) == 2
    assert capsys.readouterr().err.startswith("setup.py: --out expects a folder it can create and write, /proc/fmha-test")


def test_a_python_without_jinja2_is_sent_to_make_deps(tmp_path):
    """setup.py run by a Python that cannot import jinja2 (a stand-in package that fails as a missing one would)."""
    (tmp_path / "jinja2").mkdir()
    (tmp_path / "jinja2" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'jinja2'\", name='jinja2')\n")
    result = subprocess.run([sys.executable, "setup.py", "--list"], cwd=Path(cli.REPO), capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == f"setup.py: {sys.executable} lacks the module jinja2: run `make deps`, which installs it " \
                            "and names the Python that has it (or run setup.py with that Python)\n"


def test_a_head_dim_some_family_does_not_take_is_skipped_there_and_said(tmp_path, capsys):
    strict = [f for f in FAMILIES.values() if not f.takes_head_dim(72)]
    assert cli.main(["--head-dims", "72", "--out", str(tmp_path)]) == 0
    names = {p.stem for p in (tmp_path / "kernels").glob("*_d72_*.hip")}
    assert names and not any(KernelConfig.from_name(name).family in {f.name for f in strict} for name in names)
    out = capsys.readouterr().out
    for family in strict:
        # (mmabwd skips the default 256 as well: "head_dim 72, 256")
        assert re.search(rf"{family.name} skips head_dim 72(, \d+)* \(needs {family.head_dim_rule}\)", out), out
    for family in strict:  # taken by no family of the selection: an error
        assert cli.main(["--only", "--families", family.name, "--head-dims", "72", "--list", "--out", str(tmp_path)]) == 2
        assert f"head_dim 72: no family offers it ({family.name}: needs {family.head_dim_rule})" in capsys.readouterr().err


def test_an_invalid_value_is_reported_once(tmp_path, capsys):
    assert cli.main(["--head-dims", "7", "100000", "--archs", "gfx1030", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("head_dim 7:") == 1 and err.count("head_dim 100000:") == 1 and err.count("gfx1030") == 1
    assert "a multiple of 8 up to 256" in err


def test_backward_families_take_power_of_two_head_dims_only():
    """Their preprocess reduces a row over head_dim / 8 lanes of one warp by shuffles: 192's 24
    lanes would cross warps. Other multiples of 8 run on the next larger kernel."""
    for name in ("mmabwd", "simtbwd"):
        assert [d for d in range(8, 257, 8) if FAMILIES[name].takes_head_dim(d)] == [64, 128, 256]
        assert FAMILIES[name].serves_smaller_head_dims
