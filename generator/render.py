"""Renders the catalogue into generated/: one HIP source per kernel, the kernel tables, the
C++ view of the axes and arch facts, and the CMake source lists. Templates only substitute;
every decision is made here or in C++ traits."""
import json
import os
from pathlib import Path

import jinja2

from .archs import ARCHS, MATRIX_CORES, PLATFORMS
from .catalogue import DTYPES, FAMILIES, HEADS_KINDS, MASKS, backward_families
from .wgmma import statements as wgmma_statements

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
KERNEL_GLOB = "fmha_*.hip"


def environment():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["cpp_bool"] = lambda value: "true" if value else "false"
    return env


def write_if_different(path, text):
    """Writes only when the content changed, so Ninja rebuilds only what moved."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def selection_json(selection):
    """The selection as canonical JSON: the same selection gives the same bytes whichever command made it."""
    return json.dumps(selection, sort_keys=True)


def deterministic_backward(selection):
    """Whether the backward kernels get their deterministic loop: unless the selection says not."""
    return selection.get("deterministic_backward", True)


def render_all(configs, selection):
    """Returns {relative path: text} for the whole generated/ tree."""
    env = environment()
    files = {}
    deterministic = deterministic_backward(selection)
    kernel_template = {"fwd": "kernel.hip.j2", "bwd": "kernel_bwd.hip.j2"}
    # A backward kernel has the deterministic loop where the selection asks and its family has one.
    with_deterministic = {c.name: deterministic and FAMILIES[c.family].deterministic_loop for c in configs}
    for config in configs:
        files[f"kernels/{config.name}.hip"] = env.get_template(kernel_template[config.direction]).render(
            config=config, arch=ARCHS[config.arch], family=FAMILIES[config.family],
            deterministic=with_deterministic[config.name])
    for platform in PLATFORMS:
        files[f"kernel_table_{platform}.cpp"] = env.get_template("kernel_table.cpp.j2").render(
            platform=platform, selection=selection_json(selection),
            configs=[c for c in configs if c.platform == platform and c.direction == "fwd"],
            bwd_configs=[(c, with_deterministic[c.name]) for c in configs
                         if c.platform == platform and c.direction == "bwd"])
    files["fmha_catalogue.h"] = env.get_template("fmha_catalogue.h.j2").render(
        dtypes=DTYPES, heads_kinds=HEADS_KINDS, masks=MASKS, families=list(FAMILIES.values()),
        backward_families=backward_families(), archs=list(ARCHS.values()), platforms=PLATFORMS, matrix_cores=MATRIX_CORES)
    files["kernels.cmake"] = env.get_template("kernels.cmake.j2").render(
        archs=list(ARCHS.values()),
        kernels_by_arch={a: [c.name for c in configs if c.arch == a] for a in ARCHS})
    files["wgmma_instructions.h"] = env.get_template("wgmma_instructions.h.j2").render(
        statements=wgmma_statements())
    files["selection.json"] = json.dumps(selection, indent=2, sort_keys=True) + "\n"
    return files


def write_all(out_dir, configs, selection):
    """Writes the tree, removes kernels no longer selected; returns (written, removed) counts."""
    out_dir = Path(out_dir)
    files = render_all(configs, selection)
    written = sum(write_if_different(out_dir / rel, text) for rel, text in files.items())
    removed = 0
    for stale in (out_dir / "kernels").glob(KERNEL_GLOB):
        if f"kernels/{stale.name}" not in files:
            stale.unlink()
            removed += 1
    return written, removed
