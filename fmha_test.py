"""The project's test suite, in one pytest run (`make test`):

- the generator's tests (generator/tests);
- every GoogleTest case of the unit, GPU and C ABI binaries, one pytest item each;
- fmha.exe: bad input (no GPU needed) and a matrix of shapes checked against the reference (GPU);
- the MFMA prefill loop, the backward loops, AMD's decode variants and the KV-cache append
  emulated on the host (tests/emulation; Clang 15 or later);
- the Python package (tests/python): its binding of libfmha.so, and its API with PyTorch.

The binaries come from FMHA_BIN_DIR (default bin/). GPU items skip, saying why, when the
machine has no GPU; the Python API's, when PyTorch is missing; fmha.exe runs, when a narrowed
selection (setup.py --only or --filter) left their kernel out.
"""
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from benchmarks.shapes import SHAPES
from generator import render
from generator.archs import ARCHS
from generator.catalogue import KernelConfig
from generator.tests.test_generator import *  # noqa: F401,F403  (the generator's tests)


def _import_tests(path):
    """The test_* functions of a test module given by path (tests/python is no package)."""
    spec = importlib.util.spec_from_file_location(f"fmha_tests_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: value for name, value in vars(module).items() if name.startswith("test_")}


# The Python package's tests: its ctypes binding (no PyTorch needed), its API and dropout (PyTorch, GPU).
for _module in ("test_library.py", "test_torch_api.py", "test_dropout.py"):
    globals().update(_import_tests(Path(__file__).resolve().parent / "tests" / "python" / _module))
globals().update(_import_tests(Path(__file__).resolve().parent / "tests" / "test_pytest_summary.py"))  # make test's summary

REPO = Path(__file__).resolve().parent
BIN = Path(os.environ.get("FMHA_BIN_DIR", REPO / "bin"))
FMHA = BIN / "fmha.exe"


def narrowed_selection():
    """Whether generated/selection.json narrows the default catalogue (setup.py --only or --filter)."""
    path = REPO / "generated" / "selection.json"
    selection = json.loads(path.read_text()) if path.exists() else {}
    return bool(selection.get("only")) or selection.get("filter", "*") != "*"


NARROWED = narrowed_selection()


def fmha(*args, timeout=600):
    """Runs fmha.exe. A run whose kernel a narrowed selection left out skips, saying so; in the
    default catalogue a missing kernel stays the failure it is."""
    result = subprocess.run([str(FMHA), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0 and NARROWED and "no kernel in this build's catalogue" in result.stderr:
        pytest.skip("the narrowed selection (generated/selection.json) has no kernel for it: " +
                    result.stderr.splitlines()[0])
    return result


def device_line():
    if not FMHA.exists():
        return "no fmha.exe"
    return next((line for line in fmha("-list").stdout.splitlines() if line.startswith("Device")), "no device line")


DEVICE = device_line()
HAS_GPU = FMHA.exists() and "none (" not in DEVICE
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason=f"no GPU: {DEVICE}")


# ---------------------------------------------------------------- GoogleTest binaries

def gtest_cases(binary):
    """The test names a GoogleTest binary holds (collected without running it)."""
    path = BIN / binary
    if not path.exists():
        return [f"{binary}-missing"]
    listing = subprocess.run([str(path), "--gtest_list_tests"], capture_output=True, text=True).stdout
    cases, suite = [], None
    for line in listing.splitlines():
        line = line.split("#")[0].rstrip()
        if line and not line.startswith(" "):
            suite = line.rstrip(".")
        elif line.strip():
            cases.append(f"{suite}.{line.strip()}")
    return cases


@pytest.fixture(scope="session")
def gtest_results(tmp_path_factory):
    """Runs each GoogleTest binary once; returns {binary: {test: (status, message)}}."""
    results = {}
    for binary in ("fmha_unit_tests", "fmha_gpu_tests", "fmha_capi_tests"):
        path = BIN / binary
        if not path.exists():
            continue
        report = tmp_path_factory.mktemp("gtest") / f"{binary}.json"
        run = subprocess.run([str(path), f"--gtest_output=json:{report}"], capture_output=True, text=True)
        # The JSON report has no skip messages: take each from the test's own stdout block.
        skip_messages = {}
        for block in run.stdout.split("[ RUN      ] ")[1:]:
            skipped = re.search(r": Skipped\n(.*)", block)
            if skipped:
                skip_messages[block.split()[0]] = skipped.group(1)
        cases = {}
        if report.exists():
            for suite in json.loads(report.read_text())["testsuites"]:
                for test in suite["testsuite"]:
                    name = f"{suite['name']}.{test['name']}"
                    failures = "\n".join(f["failure"] for f in test.get("failures", []))
                    status = "failed" if failures else ("skipped" if test.get("result") == "SKIPPED" else "passed")
                    cases[name] = (status, failures or skip_messages.get(name, ""))
        results[binary] = (cases, run.stdout[-4000:] + run.stderr[-4000:])
    return results


def check_gtest(gtest_results, binary, case):
    assert not case.endswith("-missing"), f"{BIN / binary} was not built (is libgtest-dev installed?)"
    cases, output = gtest_results[binary]
    assert case in cases, f"{case} did not run:\n{output}"
    status, message = cases[case]
    if status == "skipped":
        pytest.skip(message or "skipped by GoogleTest (no GPU)")
    assert status == "passed", message


@pytest.mark.parametrize("case", gtest_cases("fmha_unit_tests"))
def test_unit(gtest_results, case):
    check_gtest(gtest_results, "fmha_unit_tests", case)


@pytest.mark.parametrize("case", gtest_cases("fmha_gpu_tests"))
def test_gpu(gtest_results, case):
    check_gtest(gtest_results, "fmha_gpu_tests", case)


@pytest.mark.parametrize("case", gtest_cases("fmha_capi_tests"))
def test_capi(gtest_results, case):
    check_gtest(gtest_results, "fmha_capi_tests", case)


# ---------------------------------------------------------------- kernels emulated on the host

def _clang_for_emulation():
    """(clang, command) where clang has the vector types and x86 _Float16 the emulation needs (15
    or later) and command(tool) is how to run a tool beside it: one on PATH, run as it is; else,
    as root, the Debian 13 root's clang++-17, which builds and runs the emulation inside that root
    (tools/trixie_hipcc.sh); None if neither."""
    for name in ("clang++-17", "clang++-16", "clang++-15", "clang++"):
        path = shutil.which(name)
        if path:
            version = re.search(r"clang version (\d+)", subprocess.run([path, "--version"], capture_output=True,
                                                                        text=True).stdout)
            if version and int(version.group(1)) >= 15:
                return path, lambda tool: [tool]
    root = Path(os.environ.get("FMHA_CACHE", "/var/cache/fmha")) / "trixie"
    if os.geteuid() == 0 and (root / "usr/bin/clang++-17").exists():
        return "clang++-17", lambda tool: ["env", f"FMHA_TRIXIE_TOOL={tool}", str(REPO / "tools" / "trixie_hipcc.sh")]
    return None


def _run_emulation(tmp_path, source):
    """Builds tests/emulation/<source>.cpp with a Clang that can and runs it: its cases must all match."""
    clang = _clang_for_emulation()
    if not clang:
        pytest.skip("no Clang 15 or later on PATH, nor the Debian 13 root's: the emulation needs its vector types "
                    "and _Float16")
    if not (REPO / "generated" / "fmha_catalogue.h").exists():
        pytest.skip("generated/ is missing: run `make` first")
    (compiler, command), emulation = clang, REPO / "tests" / "emulation"
    binary = tmp_path / source
    build = subprocess.run(command(compiler) + ["-std=c++20", "-O1", "-Wno-psabi", "-pthread", "-I", emulation, "-I",
                                                REPO / "src", "-I", REPO / "generated", emulation / f"{source}.cpp",
                                                "-o", binary], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    run = subprocess.run(command(str(binary)), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "all cases match the reference" in run.stdout, run.stdout + run.stderr


def test_the_mfma_prefill_loop_matches_the_reference_in_host_emulation(tmp_path):
    """The CDNA main loop of mmaprefill, as the AMD build compiles it, run on the host
    (tests/emulation): each lane a thread, MFMA from the documented layouts."""
    _run_emulation(tmp_path, "mfma_prefill")


def test_the_backward_loops_match_the_reference_in_host_emulation(tmp_path):
    """The backward's kernels (preprocess, the mma.sync and SIMT main loops, convert) run on the
    host: each lane a thread, mma.sync and ldmatrix from the documented layouts; dq, dk, dv
    against fp64. The SIMT loop is the AMD build's backward."""
    _run_emulation(tmp_path, "backward")


def test_the_fragment_softmax_with_row_offsets_matches_the_reference_in_host_emulation(tmp_path):
    """The fragment softmax's update with per-row offsets of each lane's own (the wgmma loop's
    ALiBi fold) run on the host: a wave of lanes, rows in groups of 4, against fp64 and the plain update."""
    _run_emulation(tmp_path, "fragment_softmax")


def test_the_decode_variants_match_the_reference_in_host_emulation(tmp_path):
    """The decode family's CUDA-core variants at AMD's waves of 64 and 32 lanes (two keys, few keys,
    the long-keys loop with key splits and the combine kernel, the run-time options' variants) and
    its tensor-core variant on NVIDIA's warp MMAs (staged items in passes of 8 and 16 rows, the
    loop, paged and option launches) run on the host against fp64: the AMD build's decode, which no
    AMD GPU here runs, and the NVIDIA one's kernel logic without a GPU."""
    _run_emulation(tmp_path, "decode")


def test_the_kv_cache_append_matches_the_reference_in_host_emulation(tmp_path):
    """The KV-cache append with rotary (kernels/kv_append.h) run on the host against fp64: every
    cache layout, both pairings, refused overflows and table entries, the rest left as it was."""
    _run_emulation(tmp_path, "kv_append")


# ---------------------------------------------------------------- fmha.exe without a GPU

def test_the_deterministic_backward_is_refused_where_not_built():
    """-bwd -deterministic where the generator built no deterministic loop: exit 2 naming its flag (no GPU needed)."""
    if render.deterministic_backward(json.loads((REPO / "generated" / "selection.json").read_text())):
        pytest.skip("this build has the deterministic loop (setup.py --no-deterministic-backward leaves it out)")
    result = fmha("-bwd", "-deterministic", "-d", "128", "-b", "1", "-h", "2", "-s", "64", "-bf16")
    if "no backward kernel in this build" in result.stderr:
        pytest.skip("no backward kernel in this build: " + result.stderr.strip())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no deterministic mode" in result.stderr and "--deterministic-backward" in result.stderr, result.stderr


@pytest.mark.parametrize("args, message", [
    (["-bogus"], "unknown flag '-bogus'"),
    (["-b"], "needs a value"),
    (["-b", "two"], "expects an integer"),
    (["-b", "0"], "batch (-b) must be positive"),
    (["-s", "-5"], "seqlen_kv (-s) must be positive"),
    (["-s", "0"], "fmha.exe: seqlen_kv (-s) must be positive (got 0)\n"),
    (["-list", "-b", "-1"], "fmha.exe: -list takes no other flag, got -b (see fmha.exe -help)\n"),
    (["-list", "-kernel", "x"], "-list takes no other flag, got -kernel"),
    (["-d", "0"], "head_dim (-d) must be positive"),
    (["-h", "32", "-gqa", "5"], "must be a multiple of KV heads"),
    (["-causal-mask", "-window-right", "3"], "-causal-mask and -window-right 3 disagree"),
    (["-window-left", "-2"], "-window-left must be >= 0, or -1 for unbounded (got -2)"),
    (["-layout", "qkv-packed", "-h", "8", "-gqa", "2"], "packed QKV layout"),
    (["-runs", "0"], "-runs must be at least 1"),
    (["-scale-bmm1", "inf"], "expects a finite fp32 number"),
    (["-scale-bmm1", "0"], "leave it out for the default 1/sqrt(d)"),
    (["-scale-bmm1", "1e-50"], "|X| >= 1.2e-38, got '1e-50'"),
    (["-scale-bmm1", "1e-40"], "|X| >= 1.2e-38, got '1e-40'"),
    (["-min-s", "0"], "-min-s must be in [1, s] = [1, 384] (got 0)"),
    (["-s", "8", "-min-s", "9"], "-min-s must be in [1, s] = [1, 8] (got 9)"),
    (["-kernel", ""], "flag -kernel needs a non-empty value"),
    (["-save-tensors", ""], "flag -save-tensors needs a non-empty value"),
    (["-v", "99"], "-v must be 0, 1 or 2 (got 99)"),
    (["-sliding-window-size", "0"], "-sliding-window-size must be positive"),
    (["-fp16", "-bf16"], "-fp16 and -bf16 disagree"),
    (["-d", "64", "-d", "128"], "flag -d given twice"),
    (["-d", "264", "-bf16"], "nearest kernels"),
    (["-kernel", "fmha_fwd_fp16_d72_mha_nomask_prefill_gfx90a"], "not in this build's catalogue"),
    (["-kernel", "fmha_fwd_fp16_d64"], "-kernel fmha_fwd_fp16_d64 is not in this build's catalogue (see -list)"),
    (["-softcapping-scale-bmm1", "-1"], "expects a finite fp32 number > 0 (or 0: off), got '-1'"),
    (["-softcapping-scale-bmm1", "inf"], "expects a finite fp32 number > 0"),
    (["-page-size", "32"], "-page-size needs -paged-kv"),
    (["-paged-kv", "-page-size", "48"], "page size (-page-size) must be a power of two from 16 to 256 (got 48)"),
    (["-paged-kv", "-page-size", "0"], "-page-size must be a power of two from 16 to 256 (got 0)"),
    (["-paged-kv", "-page-size", "512"], "(got 512)"),
    (["-paged-kv", "-layout", "qkv-packed"], "cannot take the packed QKV layout"),
    (["-bwd", "-paged-kv", "-bf16"], "-bwd: the backward kernels take no paged KV cache"),
    (["-bwd", "-kernel", "fmha_fwd_fp16_d64_mha_nomask_prefill_sm90"], "-bwd does not take -kernel yet"),
    (["-dropout", "1"], "flag -dropout expects a probability in [0, 1), got '1'"),
    (["-deterministic"], "-deterministic is an option of the backward: give -bwd too"),
])
def test_bad_input_exits_2_with_a_message(args, message):
    result = fmha(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "terminate" not in result.stderr


@pytest.mark.parametrize("head_dim", [264, 100000])
def test_a_head_dim_the_generator_rejects_gets_its_rule_not_a_command(head_dim):
    """Every head_dim up to 256 runs (on the next larger kernel; test_fmha_exe_checks_element_rows);
    past it fmha.exe says why no generator command can add one (the advice for a head_dim it can
    add: test_heuristics)."""
    result = fmha("-d", head_dim)
    assert result.returncode == 2, result.stdout + result.stderr
    generator = subprocess.run([sys.executable, "setup.py", "--refresh", "--head-dims", str(head_dim), "--list"],
                               cwd=REPO, capture_output=True, text=True)
    assert generator.returncode != 0, generator.stdout
    assert not re.search(r"python3 setup.py (.*) && make$", result.stderr, re.M), result.stderr
    assert f"head_dim {head_dim} cannot be generated" in result.stderr, result.stderr


def test_a_forced_kernel_that_does_not_fit_says_which_fields():
    name = next(line.split()[0] for line in fmha("-list").stdout.splitlines() if line.startswith("fmha_fwd_"))
    config = KernelConfig.from_name(name)
    dtype, head_dim = config.dtype, config.head_dim
    other = "bf16" if dtype == "fp16" else "fp16"
    result = fmha("-kernel", name, f"-{other}", "-d", head_dim + 8)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (f"cannot run this problem: its dtype is {dtype}, the problem's {other} (-{dtype}); its head_dim is "
            f"{head_dim}, the problem's {head_dim + 8} (-d {head_dim})") in result.stderr
    assert "setup.py" not in result.stderr  # the kernel exists: nothing to regenerate


def test_a_forced_tensor_core_kernel_refuses_what_it_does_not_take():
    """A -kernel forced onto a problem its family declines is refused with the reason, exit 2: the
    tensor-core family's positive softmax scale (its loops take every serving option fmha.exe has)."""
    names = [line.split()[0] for line in fmha("-list").stdout.splitlines() if "_mmaprefill_" in line]
    if not names:
        pytest.skip("no tensor-core prefill kernels in this build")
    name = names[0]
    dtype, head_dim, heads = name.split("_")[2], name.split("_")[3][1:], name.split("_")[4]
    problem = ["-kernel", name, f"-{dtype}", "-d", head_dim] + (["-causal-mask"] if "_causal_" in name else [])
    problem += {"mha": [], "mqa": ["-mqa"], "gqa": ["-gqa", "4"]}[heads]
    result = fmha(*problem, "-scale-bmm1", "-0.5", "-softcapping-scale-bmm1", "30", "-alibi")
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("cannot run this problem: the tensor-core family takes a positive softmax scale only (a positive "
            "-scale-bmm1)") in result.stderr, result.stderr
    refusal = next(line for line in result.stderr.splitlines() if "cannot run this problem:" in line)
    assert "softcapping" not in refusal and "ALiBi" not in refusal, refusal


def test_help_lists_the_flags_and_exits_0():
    result = fmha("-help")
    assert result.returncode == 0
    for flag in ("-s-q", "-gqa", "-causal-mask", "-save-tensors", "-kernel", "bottom-right", "-softcapping-scale-bmm1",
                 "-alibi", "-paged-kv", "-page-size"):
        assert flag in result.stdout


def test_list_matches_the_generator():
    """The C++ table and the Python catalogue agree on every name (one naming rule)."""
    result = fmha("-list")
    assert result.returncode == 0
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith(("fmha_fwd_", "fmha_bwd_"))}
    generated = subprocess.run([sys.executable, "setup.py", "--refresh", "--list"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.split()
    platform = KernelConfig.from_name(min(listed)).platform
    expected = {n for n in generated if KernelConfig.from_name(n).platform == platform}
    assert listed == expected


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_no_gpu_is_reported_with_exit_3():
    result = fmha("-b", "2", "-h", "2", "-s", "8", "-d", "64")
    assert result.returncode == 3
    # The cause, not a runtime's guess (CUDA's runtime without a driver blames the driver's version).
    assert re.search(r"no GPU found: (no (NVIDIA|AMD GPU) driver|the (NVIDIA|AMD) driver sees no GPU|no access to /dev/kfd)",
                     result.stderr), result.stderr
    assert re.search(r"\(this is the (AMD|NVIDIA) build; `make PLATFORM=(nvidia|amd)` builds for", result.stderr)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: the GPU runs take these shapes")
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_named_shape_is_a_problem_this_build_runs(name):
    """Valid and covered by the catalogue: without a GPU fmha.exe gets as far as looking for one."""
    result = fmha(*SHAPES[name].fmha_args())
    if "nearest kernels in this build" in result.stderr:
        pytest.skip(f"this build's catalogue has no kernel for it: {result.stderr.splitlines()[0]}")
    assert result.returncode == 3, result.stderr


def test_shapes_print_their_flags_for_the_shell_tools():
    shapes = subprocess.run([sys.executable, "benchmarks/shapes.py", "config3", "long4k"], cwd=REPO,
                            capture_output=True, text=True)
    assert shapes.returncode == 0, shapes.stderr
    assert shapes.stdout.splitlines() == [" ".join(SHAPES[name].fmha_args()) for name in ("config3", "long4k")]
    unknown = subprocess.run([sys.executable, "benchmarks/shapes.py", "config3", "config9"], cwd=REPO,
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown shape(s) config9 (known: config1," in unknown.stderr
    assert unknown.stdout == ""


def test_compare_short_grid_counts_each_builds_best_run(tmp_path):
    """benchmarks/compare_short_grid.py: a point counts at its best run of a build."""
    def table(path, first_row):
        rows = [first_row, ["0.95"] * 16]
        path.write_text("| dtype | d | heads | seqlen_q | rows per KV head | ... |\n|---|\n" + "".join(
            f"| bf16 | {d} | 16/16 | 1 | 1 | " + " | ".join(cells) + " |\n" for d, cells in zip((64, 128), rows)))
    table(tmp_path / "a1.md", ["0.50"] * 16)
    table(tmp_path / "a2.md", ["0.91"] * 8 + ["0.40"] * 8)  # the best of a1 and a2: 8 points at 0.91
    table(tmp_path / "b1.md", ["0.86"] * 16)
    result = subprocess.run([sys.executable, "benchmarks/compare_short_grid.py", str(tmp_path / "a1.md"),
                             str(tmp_path / "a2.md"), "--against", str(tmp_path / "b1.md"), "--head-dim", "64"],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("first: 24 of 32 at 0.9 of copy or better (d64 8, d128 16); 24 at 0.85;"), lines[0]
    assert lines[1].startswith("second: 16 of 32 at 0.9 of copy or better (d64 0, d128 16); 32 at 0.85;"), lines[1]
    assert lines[-1] == "   1 " + " ".join(["-0.05"] * 8 + ["+0.36"] * 8)
    # --compose: the second build's points where the rule holds (d64 at 9-16 keys: 0.86), the first's elsewhere
    composed = subprocess.run([sys.executable, "benchmarks/compare_short_grid.py", str(tmp_path / "a1.md"), str(tmp_path / "a2.md"),
                               "--against", str(tmp_path / "b1.md"), "--compose", "d == 64 and keys > 8 and heads_kv == 16"],
                              cwd=REPO, capture_output=True, text=True)
    assert composed.returncode == 0, composed.stderr
    assert composed.stdout.splitlines()[2].startswith(
        "composed (d == 64 and keys > 8 and heads_kv == 16): 24 of 32 at 0.9 of copy or better (d64 8, d128 16); 32 at 0.85;"
        " median 0.93; lowest 0.86"), composed.stdout


@pytest.mark.parametrize("source, kernel, fails", [
    ("fmha_fwd_bf16_d128_gqa_causal_decode_sm90.hip", "_ZN4fmha6decode17mma_attend_kernelI", True),
    ("fmha_fwd_bf16_d64_gqa_causal_decode_sm90.hip", "_ZN4fmha6decode18staged_rows_kernelI", True),
    ("fmha_fwd_bf16_d128_gqa_causal_mmaprefill_sm90.hip", "_ZN4fmha11mmaprefill11wgmma_kernelI", True),
    ("fmha_fwd_fp16_d256_gqa_causal_decode_sm90.hip", "_ZN4fmha6decode13attend_kernelI", False),
])
def test_ptxas_guard_fails_a_tensor_core_kernels_spill(source, kernel, fails):
    """cmake/ptxas_guard.sh (the NVIDIA build's compiler launcher) fails a compile whose ptxas
    spills registers of a tensor-core kernel, decode's included, and passes a CUDA-core one's."""
    message = f"ptxas warning : Registers are spilled to local memory in function '{kernel}X', 4 bytes spill stores"
    result = subprocess.run(["bash", "cmake/ptxas_guard.sh", "sh", "-c", f"echo \"$0\" >&2", message, "-c", source],
                            cwd=REPO, capture_output=True, text=True)
    assert (result.returncode != 0) == fails, result.stderr
    assert message in result.stderr


# ---------------------------------------------------------------- set-up on a fresh machine

@pytest.mark.skipif(os.geteuid() != 0, reason="make deps installs packages as root")
def test_make_deps_completes_the_python_that_make_takes(tmp_path):
    """The image's case: python3 on PATH has jinja2 but not pytest, the system's python3 pytest
    but not jinja2. `make` sends the user to `make deps`, which installs what the system's python3
    lacks and names it; then `make` takes that one. Stand-ins: two venvs whose modules are empty
    packages, and an apt-get that adds python3-<module> to the system one."""
    def python_with(name, *modules):
        venv.create(tmp_path / name, with_pip=False)
        site = next((tmp_path / name).glob("lib/python3*/site-packages"))
        for module in modules:
            (site / module).mkdir()
            (site / module / "__init__.py").write_text("")
        return tmp_path / name / "bin" / "python3", site

    path_python, _ = python_with("pyenv", "jinja2")
    system_python, system_site = python_with("system", "pytest")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "apt-get").write_text(
        "#!/bin/sh\nfor package in \"$@\"; do case $package in python3-*)\n"
        f"  mkdir {system_site}/${{package#python3-}} && touch {system_site}/${{package#python3-}}/__init__.py;; esac; done\n")
    (fake_bin / "apt-get").chmod(0o755)
    env = {**os.environ, "PATH": f"{path_python.parent}:{fake_bin}:{os.environ['PATH']}",
           "FMHA_SYSTEM_PYTHON": str(system_python)}
    env.pop("PYTHON", None)

    def make(*args):
        return subprocess.run(["make", *args, "PLATFORM=nvidia"], cwd=REPO, env=env, capture_output=True, text=True)

    before = make("check-platform")
    assert before.returncode != 0 and "run `make deps`" in before.stderr, before.stderr
    deps = make("deps")
    assert deps.returncode == 0, deps.stdout + deps.stderr
    assert "python3-jinja2 python3-numpy" in deps.stdout and "python3-pytest" not in deps.stdout, deps.stdout
    assert f"the build's Python is {system_python}" in deps.stdout
    after = make("-n", "generate")
    assert after.returncode == 0 and f"{system_python} setup.py --refresh" in after.stdout, after.stdout + after.stderr


# ---------------------------------------------------------------- the build: incremental

def build_setting(name):
    """A setting of the CMake build the binaries come from (None when FMHA_BIN_DIR is not one)."""
    cache = BIN / "CMakeCache.txt"
    text = cache.read_text() if cache.exists() else ""
    found = re.search(rf"^{name}:\w+=(.*)$", text, re.M)
    return found.group(1) if found else None


PLATFORM = build_setting("FMHA_PLATFORM")
needs_build_dir = pytest.mark.skipif(PLATFORM is None, reason=f"{BIN} is not a CMake build folder (make test sets one)")


def run(command, cwd):
    result = subprocess.run(list(map(str, command)), cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def offload_targets(object_file):
    """The targets of the clang offload bundle in a HIP object: its header is the magic, a
    64-bit count, then per entry 64-bit offset, size and triple length, and the triple."""
    data = object_file.read_bytes()
    magic = b"__CLANG_OFFLOAD_BUNDLE__"
    start = data.find(magic)
    assert start >= 0 and data.count(magic) == 1, f"{object_file}: expected one offload bundle"
    count = int.from_bytes(data[start + 24:start + 32], "little")
    position, targets = start + 32, {}
    for _ in range(count):
        size, triple_length = (int.from_bytes(data[position + i:position + i + 8], "little") for i in (8, 16))
        triple = data[position + 24:position + 24 + triple_length].decode()
        targets[triple] = size
        position += 24 + triple_length
    return targets


@needs_build_dir
@pytest.mark.skipif(PLATFORM != "amd", reason="the AMD build's code objects")
def test_each_amd_kernel_holds_a_code_object_of_its_own_target():
    """Every kernel of the build is compiled for its arch's own target, gfx942 as gfx942 (no
    stand-in), and holds nothing for another target."""
    listed = [line.split()[0] for line in fmha("-list").stdout.splitlines() if line.startswith("fmha_fwd_")]
    assert listed
    for name in listed:
        arch = ARCHS[name.rsplit("_", 1)[1]]
        objects = list(BIN.glob(f"CMakeFiles/kernels_{arch.name}.dir/**/{name}.hip.o"))
        assert len(objects) == 1, f"{name}: {objects}"
        device = {triple: size for triple, size in offload_targets(objects[0]).items() if not triple.startswith("host-")}
        assert list(device) == [f"hipv4-amdgcn-amd-amdhsa--{arch.compile_target}"] and min(device.values()) > 0, device


@needs_build_dir
@pytest.mark.skipif(PLATFORM != "nvidia", reason="the NVIDIA build's compiler")
def test_the_decode_results_are_stored_as_16_byte_vectors(tmp_path):
    """nvcc wrote some 16-byte stores through an element pointer as four 4-byte stores
    (docs/decisions.md, "Results stored as 16-byte vectors"): the decode family's PTX, whose
    kernels store O and the split partials 8 results at a time, has no 4-byte store 12 bytes past
    an address."""
    run([sys.executable, "setup.py", "--only", "--out", tmp_path, "--archs", "sm90", "--dtypes", "bf16", "--head-dims", "64",
         "--heads", "gqa", "--masks", "causal", "--families", "decode"], REPO)
    [source] = (tmp_path / "kernels").glob("*_decode_sm90.hip")
    ptx = tmp_path / "decode.ptx"
    run([build_setting("CMAKE_CUDA_COMPILER"), "-std=c++17", "-O3", "-x", "cu", "-arch=sm_90a", "--ptx",
         "-I", REPO / "src/platform/hip_on_cuda", "-I", REPO / "src", "-I", tmp_path, source, "-o", ptx], REPO)
    text = ptx.read_text()
    vectors, split = text.count("st.global.v4"), re.findall(r"st\.global\.[busf]32\s+\[%rd\d+\+12\]", text)
    assert vectors > 0 and not split, f"{vectors} vector stores; {len(split)} 4-byte stores 12 bytes past an address: {split[:2]}"


@needs_build_dir
def test_make_again_compiles_nothing(tmp_path):
    """What `make` does once more after `make` (and so `make test` after `make`): render the
    recorded selection (into a copy of generated/), which must rewrite nothing, and leave Ninja
    nothing to do."""
    shutil.copytree(REPO / "generated", tmp_path / "generated")
    assert "wrote 0 changed file(s)" in run([sys.executable, "setup.py", "--refresh", "--out", tmp_path / "generated"], REPO)
    assert "ninja: no work to do" in run(["ninja", "-C", BIN, "-n"], REPO)


@needs_build_dir
def test_adding_a_head_dim_compiles_only_its_kernels_and_the_table(tmp_path):
    """In a copy of the tree with a one-kernel catalogue, configured by the Makefile as a user's
    is, with a launcher that writes dependencies instead of compiling: every object is up to
    date, then `setup.py --refresh --head-dims 96` leaves exactly the new kernel and the table to compile."""
    copy = tmp_path / "fmha"
    skipped = {"build", "bin", "generated", ".git", ".pytest_cache", "toolchain"}
    shutil.copytree(REPO, copy, ignore=lambda folder, names: [
        name for name in names if name == "__pycache__" or (Path(folder) == REPO and name in skipped)])
    arch = next(a.name for a in ARCHS.values() if a.platform == PLATFORM)
    run([sys.executable, "setup.py", "--only", "--dtypes", "fp16", "--head-dims", "64", "--heads", "mha", "--masks",
         "nomask", "--families", "decode", "--archs", arch], copy)
    build = copy / "build" / PLATFORM
    # The compiler this build was configured with, whichever the copy's Makefile would pick.
    compiler = [f"HIPCC={build_setting('CMAKE_CXX_COMPILER')}"] if PLATFORM == "amd" else []
    run(["make", "configure", f"PLATFORM={PLATFORM}", f"PYTHON={sys.executable}", *compiler,
         f"LAUNCHER={copy / 'tests' / 'build' / 'deps_only_launcher.py'}"], copy)

    def objects():
        targets = run(["ninja", "-C", build, "-t", "targets", "all"], copy)
        return sorted(line.split(":")[0] for line in targets.splitlines() if line.split(":")[0].endswith(".o"))

    def to_compile():
        dry_run = run(["ninja", "-C", build, "-n", *objects()], copy)
        return {line.split()[-1] for line in dry_run.splitlines() if " Building " in line}

    run(["ninja", "-C", build, *objects()], copy)
    assert to_compile() == set()
    run([sys.executable, "setup.py", "--refresh", "--head-dims", "96"], copy)
    run(["ninja", "-C", build, "build.ninja"], copy)  # CMake reads the new kernel list
    expected = {f"generated/kernels/fmha_fwd_fp16_d96_mha_nomask_decode_{arch}.hip.o", f"generated/kernel_table_{PLATFORM}.cpp.o"}
    assert {name.split(".dir/", 1)[1] for name in to_compile()} == expected


# ---------------------------------------------------------------- fmha.exe on the GPU

# The SPEC's configs and the headline's variants (benchmarks/shapes.py), then shapes of our own.
GPU_RUNS = {
    **{name: SHAPES[name].fmha_args() for name in ("config1", "config2", "config3", "config4", "s2", "gqa", "mqa_bf16")},
    "odd_prefill_causal": ["-b", "3", "-h", "6", "-gqa", "2", "-s", "333", "-s-q", "77", "-d", "64", "-causal-mask"],
    "prefill_bshd": ["-b", "2", "-h", "8", "-s", "1000", "-d", "128", "-layout", "bshd", "-bf16"],
    "prefill_packed": ["-b", "2", "-h", "4", "-s", "513", "-d", "256", "-layout", "qkv-packed", "-causal-mask"],
    "sliding_window": ["-b", "2", "-h", "4", "-s", "700", "-d", "64", "-sliding-window-size", "100"],
    "local_window_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "900", "-s-q", "300", "-d", "128", "-window-left",
                         "50", "-window-right", "20"],
    "causal_more_queries_than_keys": ["-b", "3", "-h", "4", "-s", "100", "-s-q", "333", "-d", "64", "-causal-mask"],
    "variable_lengths": ["-b", "7", "-h", "4", "-s", "300", "-min-s", "1", "-d", "128", "-causal-mask"],
    "long_decode": ["-b", "4", "-h", "8", "-gqa", "2", "-s", "16384", "-s-q", "1", "-d", "128"],
    # the short-key grid's variants: one row at 9-16 keys (the wide range), 12 and 16 rows per KV
    # head at 3-4 keys (staged passes of 16 rows; causal rows past the keys see none), 6 rows at d256
    "short_keys_one_row_bf16": ["-b", "5000", "-h", "8", "-s", "13", "-s-q", "1", "-d", "128", "-bf16"],
    "short_keys_12_rows_gqa": ["-b", "777", "-h", "32", "-gqa", "8", "-s", "3", "-s-q", "3", "-d", "128"],
    "short_keys_16_rows_causal": ["-b", "999", "-h", "16", "-s", "4", "-s-q", "16", "-d", "64", "-causal-mask"],
    "short_keys_d256_6_rows_loop": ["-b", "3000", "-h", "16", "-s", "4", "-s-q", "6", "-d", "256", "-causal-mask", "-bf16"],
    # d256 on the rows-as-M kernel (O in two parts): 12 rows at 3 keys; 3 KV heads of 2 rows at 5
    # keys in tiles of 2 heads (the last tile half empty)
    "short_keys_d256_12_rows_as_m": ["-b", "777", "-h", "32", "-gqa", "8", "-s", "3", "-s-q", "3", "-d", "256"],
    "short_keys_d256_2_heads_a_tile": ["-b", "1001", "-h", "6", "-gqa", "3", "-s", "5", "-s-q", "1", "-d", "256", "-bf16"],
}
# Runs that also ask for the log-sum-exps: each family, and each way the decode family merges
# key splits (none, in shared memory, through the workspace and the combine kernel).
LSE_RUNS = {
    "lse_headline_gqa": GPU_RUNS["gqa"],
    "lse_prefill_varlen_causal": GPU_RUNS["variable_lengths"],
    "lse_prefill_window": GPU_RUNS["sliding_window"],
    "lse_decode_block_merge": SHAPES["long4k"].fmha_args(),
    "lse_decode_combine": dataclasses.replace(SHAPES["long32k_b1"], dtype="bf16").fmha_args(),
    "lse_decode_varlen": ["-b", "5", "-h", "8", "-gqa", "2", "-s", "3000", "-s-q", "2", "-min-s", "1", "-d", "256",
                          "-causal-mask"],
}

# Softcapping, ALiBi and paged KV caches: each family that takes them, each way the decode
# family merges key splits, page sizes 16 to 256, variable lengths.
SERVING_RUNS = {
    "softcap_decode_block_merge": ["-b", "64", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "4096",
                                   "-softcapping-scale-bmm1", "30"],
    "alibi_decode_combine_bf16": ["-b", "1", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "32768", "-bf16",
                                  "-alibi"],
    "alibi_softcap_decode_short_keys": ["-b", "30720", "-h", "16", "-s", "2", "-s-q", "1", "-d", "256", "-alibi",
                                        "-softcapping-scale-bmm1", "5"],
    "alibi_prefill_causal_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "513", "-d", "128", "-causal-mask", "-alibi"],
    "softcap_alibi_prefill_window_bf16": ["-b", "2", "-h", "4", "-s", "700", "-d", "64", "-sliding-window-size", "100",
                                          "-bf16", "-softcapping-scale-bmm1", "20", "-alibi"],
    "paged16_decode": ["-b", "64", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "4096", "-paged-kv",
                       "-page-size", "16"],
    "paged64_decode_long": ["-b", "2", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "32768", "-paged-kv",
                            "-page-size", "64"],
    "paged256_decode_d256_causal": ["-b", "5", "-h", "8", "-gqa", "2", "-s", "3000", "-s-q", "2", "-min-s", "1", "-d",
                                    "256", "-causal-mask", "-paged-kv", "-page-size", "256"],
    "paged16_short_keys": ["-b", "4096", "-h", "8", "-s", "2", "-s-q", "1", "-d", "128", "-paged-kv", "-page-size", "16"],
    "paged_prefill_bshd": ["-b", "2", "-h", "4", "-s", "700", "-d", "256", "-layout", "bshd", "-paged-kv", "-page-size",
                           "128"],
    "everything_varlen": ["-b", "7", "-h", "8", "-gqa", "2", "-s", "300", "-min-s", "1", "-d", "64", "-causal-mask",
                          "-paged-kv", "-page-size", "32", "-alibi", "-softcapping-scale-bmm1", "10"],
    "paged16_chunked_prefill_gqa": ["-b", "3", "-h", "16", "-gqa", "4", "-s", "3000", "-s-q", "512", "-min-s", "700",
                                    "-d", "128", "-causal-mask", "-paged-kv", "-page-size", "16"],
    # Pages of 16 on the d128 kernel, zeros past a smaller head_dim.
    "paged16_chunked_prefill_d96_bf16": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "1500", "-s-q", "600", "-min-s", "400",
                                         "-d", "96", "-causal-mask", "-paged-kv", "-page-size", "16", "-bf16"],
    "paged256_chunked_prefill_d64_bf16": ["-b", "2", "-h", "8", "-s", "2100", "-s-q", "700", "-d", "64", "-causal-mask",
                                          "-paged-kv", "-page-size", "256", "-bf16"],
    "paged64_prefill_d64_nomask": ["-b", "2", "-h", "4", "-s", "900", "-min-s", "1", "-d", "64", "-paged-kv",
                                   "-page-size", "64"],
    "paged32_prefill_window": ["-b", "3", "-h", "4", "-gqa", "2", "-s", "999", "-min-s", "1", "-d", "128",
                               "-window-left", "200", "-window-right", "30", "-paged-kv", "-page-size", "32"],
    "softcap_prefill_d64_long_tiles": ["-b", "2", "-h", "8", "-s", "1000", "-d", "64", "-softcapping-scale-bmm1", "30"],
    "softcap_prefill_d256_gqa_bf16": ["-b", "1", "-h", "8", "-gqa", "4", "-s", "1100", "-d", "256", "-causal-mask",
                                      "-softcapping-scale-bmm1", "30", "-bf16"],
    "alibi_packed_prefill_d256_bf16": ["-b", "6", "-h", "8", "-gqa", "4", "-s", "700", "-min-s", "1", "-d", "256",
                                       "-layout", "packed", "-causal-mask", "-alibi", "-bf16"],
    # Dropout: the reference applies the mask the kernel drew (launch_dropout_mask).
    "dropout_prefill_causal_gqa_bf16": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "333", "-s-q", "200", "-d", "128",
                                        "-causal-mask", "-dropout", "0.17", "-bf16"],
    "dropout_prefill_varlen_softcap": ["-b", "3", "-h", "4", "-s", "500", "-min-s", "1", "-d", "64", "-dropout", "0.5",
                                       "-softcapping-scale-bmm1", "30"],
}

# Packed variable-length batches (-layout packed: cu_seqlens, lengths as -min-s draws them, odd
# and 1-token sequences among them): each family, GQA packing of short sequences in a tile,
# windows, a paged cache beside packed queries; the family each should take.
PACKED_RUNS = {
    "packed_prefill_causal_gqa": (["-b", "9", "-h", "8", "-gqa", "2", "-s", "777", "-min-s", "1", "-d", "128",
                                   "-causal-mask"], "mmaprefill"),
    "packed_prefill_d64_persistent": (["-b", "5", "-h", "4", "-s", "1500", "-min-s", "1", "-d", "64"], "mmaprefill"),
    "packed_prefill_d256_window_bf16": (["-b", "4", "-h", "4", "-s", "600", "-min-s", "100", "-d", "256",
                                         "-sliding-window-size", "50", "-bf16"], "mmaprefill"),
    "packed_short_sequences_gqa_tiles": (["-b", "20", "-h", "32", "-gqa", "8", "-s", "40", "-min-s", "1", "-d", "64"],
                                         "mmaprefill"),
    "packed_decode_causal": (["-b", "33", "-h", "16", "-gqa", "4", "-s", "3000", "-s-q", "2", "-min-s", "1", "-d", "128",
                              "-causal-mask"], "decode"),
    "packed_decode_short_keys_d256": (["-b", "300", "-h", "8", "-s", "9", "-s-q", "1", "-min-s", "1", "-d", "256"],
                                      "decode"),
    "packed_queries_paged_cache": (["-b", "5", "-h", "4", "-s", "500", "-min-s", "1", "-d", "64", "-causal-mask",
                                    "-paged-kv", "-page-size", "32"], "mmaprefill"),
}

# Element rows (a head_dim that is not a multiple of 8: rows read and written element by
# element, on the tensor-core family's next larger kernel): odd lengths, GQA, each layout, a
# paged cache, decode-shaped rows the decode family cannot read, the scoring options.
ELEMENT_ROW_RUNS = {
    "d59_causal_gqa": ["-b", "3", "-h", "6", "-gqa", "3", "-s", "333", "-s-q", "190", "-d", "59", "-causal-mask"],
    "d111_bshd_bf16": ["-b", "2", "-h", "5", "-s", "700", "-d", "111", "-layout", "bshd", "-bf16"],
    "d7_packed_window": ["-b", "5", "-h", "4", "-s", "400", "-min-s", "1", "-d", "7", "-layout", "packed",
                         "-window-left", "60", "-window-right", "9"],
    "d203_qkv_packed_causal": ["-b", "2", "-h", "3", "-s", "257", "-d", "203", "-layout", "qkv-packed", "-causal-mask"],
    "d59_paged_chunked_prefill": ["-b", "3", "-h", "8", "-gqa", "4", "-s", "900", "-s-q", "200", "-min-s", "300", "-d",
                                  "59", "-causal-mask", "-paged-kv", "-page-size", "16", "-bf16"],
    "d111_decode_shaped_softcap_alibi": ["-b", "4", "-h", "8", "-gqa", "8", "-s", "1000", "-s-q", "1", "-d", "111",
                                         "-softcapping-scale-bmm1", "20", "-alibi"],
}


def checked_run(*args):
    """fmha.exe with the LSE and the launch described: both checks succeed."""
    result = fmha(*args, "-lse", "-v", "1", "-runs", "3", "-warm-up-runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checks........: SUCCESS" in result.stdout
    assert "Checks LSE....: SUCCESS" in result.stdout
    return result


@needs_gpu
@pytest.mark.parametrize("name", list(ELEMENT_ROW_RUNS))
def test_fmha_exe_checks_element_rows(name):
    result = checked_run(*ELEMENT_ROW_RUNS[name])
    kernel = re.search(r"^Kernel\.+: (\S+)", result.stdout, re.M)
    assert kernel and "_mmaprefill_" in kernel.group(1), result.stdout
    if kernel.group(1).endswith("_sm90"):
        assert re.search(r"^Launch\.+: .*element rows", result.stdout, re.M), result.stdout


@needs_gpu
@pytest.mark.parametrize("name", list(PACKED_RUNS))
def test_fmha_exe_checks_packed_batches(name):
    args, family = PACKED_RUNS[name]
    result = checked_run(*args, "-layout", "packed")
    kernel = re.search(r"^Kernel\.+: (\S+)", result.stdout, re.M)
    on_wgmma = any(line.endswith("_sm90") for line in fmha("-list").stdout.split())
    if family != "mmaprefill" or on_wgmma:
        assert kernel and f"_{family}_" in kernel.group(1), result.stdout


@needs_gpu
@pytest.mark.parametrize("name", list(SERVING_RUNS))
def test_fmha_exe_checks_the_serving_options(name):
    result = checked_run(*SERVING_RUNS[name])
    kernel = re.search(r"^Kernel\.+: (\S+) \((.*)\)$", result.stdout, re.M)
    assert kernel, result.stdout
    paged = "-paged-kv" in SERVING_RUNS[name]
    if "_decode_" in kernel.group(1):  # paged launches with no other option: the variant with paging alone, on tensor cores
        variant = "(run-time options|paged KV)" if paged else "run-time options"
        assert re.search(rf"^Launch\.+: .* variant with {variant}", result.stdout, re.M), result.stdout
    elif "_mmaprefill_" in kernel.group(1):  # the wgmma loop takes them all
        assert kernel.group(1).endswith("_sm90"), result.stdout
        launch = re.search(r"^Launch\.+: (.*)$", result.stdout, re.M).group(1)
        args = SERVING_RUNS[name]
        assert paged == ("K/V tiles on a grid of pages" in launch), result.stdout
        if paged and not any(flag in args for flag in ("-alibi", "-softcapping-scale-bmm1", "-dropout")):
            # pages alone: the paged kernel, but at d64 without a mask (tiles.h, has_paged_kernel)
            d64_nomask = int(args[args.index("-d") + 1]) <= 64 and "-causal-mask" not in args
            assert ("the producer's copies" if d64_nomask else "the paged kernel") in launch, result.stdout
        else:  # the options on their own kernel, with pages on the copies' one
            assert "the kernel with the serving options" in launch, result.stdout
            assert paged == ("the producer's copies" in launch), result.stdout
    elif any("_mmaprefill_" in line for line in fmha("-list").stdout.splitlines()):  # passed over, and why
        assert "; not mmaprefill: the tensor-core family " in kernel.group(2), result.stdout


@needs_gpu
@pytest.mark.parametrize("name", list(GPU_RUNS))
def test_fmha_exe_checks_succeed(name):
    result = fmha(*GPU_RUNS[name], "-runs", "3", "-warm-up-runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checks........: SUCCESS" in result.stdout
    assert re.search(r"Elapsed \.+: [\d.]+ us \([\d.]+x\), [\d.]+ Tflop/s, [\d.]+ GB/s", result.stdout)


BACKWARD_RUNS = {  # fmha.exe -bwd: odd lengths, GQA, both dtypes, a two-sided window, rows that see no key
    "gqa_causal_fp16": ["-d", "128", "-b", "2", "-h", "8", "-gqa", "2", "-s", "1000", "-causal-mask", "-fp16"],
    "varlen_bf16": ["-d", "128", "-b", "3", "-h", "6", "-gqa", "3", "-s", "700", "-min-s", "100", "-bf16"],
    "window_fp16": ["-d", "64", "-b", "3", "-h", "4", "-s", "333", "-s-q", "200", "-window-left", "50",
                    "-window-right", "7", "-fp16"],
    "empty_rows": ["-d", "64", "-b", "1", "-h", "2", "-s", "129", "-s-q", "257", "-causal-mask", "-fp16"],
    # packed sequences of 1 to 300 tokens: a tile's rows past a sequence are the next one's
    "packed_causal_bf16": ["-d", "128", "-b", "7", "-h", "6", "-gqa", "3", "-s", "300", "-min-s", "1", "-layout", "packed",
                           "-causal-mask", "-bf16"],
    "packed_d64_fp16": ["-d", "64", "-b", "5", "-h", "4", "-s", "190", "-min-s", "3", "-layout", "packed", "-fp16"],
    "packed_d256_bf16": ["-d", "256", "-b", "4", "-h", "2", "-s", "150", "-min-s", "1", "-layout", "packed",
                         "-causal-mask", "-bf16"],
    # dropout: the reference backward applies the mask the forward kernel drew
    "dropout_gqa_causal_bf16": ["-d", "128", "-b", "2", "-h", "8", "-gqa", "2", "-s", "333", "-s-q", "200", "-causal-mask",
                                "-dropout", "0.17", "-bf16"],
    "dropout_packed_d64_fp16": ["-d", "64", "-b", "4", "-h", "4", "-s", "250", "-min-s", "1", "-layout", "packed",
                                "-dropout", "0.5", "-fp16"],
    # softcapping (dS times 1 - tanh^2) and ALiBi (from each row's diagonal, per sequence), on every loop's tiles
    "softcap_gqa_causal_bf16": ["-d", "128", "-b", "2", "-h", "8", "-gqa", "4", "-s", "700", "-s-q", "333", "-causal-mask",
                                "-softcapping-scale-bmm1", "5", "-bf16"],
    "alibi_varlen_fp16": ["-d", "64", "-b", "3", "-h", "4", "-s", "500", "-min-s", "50", "-alibi", "-fp16"],
    "softcap_alibi_packed_d256_bf16": ["-d", "256", "-b", "4", "-h", "4", "-gqa", "2", "-s", "300", "-min-s", "1",
                                       "-layout", "packed", "-causal-mask", "-softcapping-scale-bmm1", "10", "-alibi",
                                       "-dropout", "0.2", "-bf16"],
    "softcap_window_fp16": ["-d", "64", "-b", "2", "-h", "4", "-s", "400", "-window-left", "90", "-window-right", "20",
                            "-softcapping-scale-bmm1", "2", "-fp16"],
    # deterministic: a second launch gives the same bits (each head dim's dQ path: TMA adds, atomics)
    "deterministic_d128_causal_bf16": ["-d", "128", "-b", "2", "-h", "8", "-gqa", "4", "-s", "1500", "-s-q", "900",
                                       "-causal-mask", "-deterministic", "-bf16"],
    "deterministic_d64_window_fp16": ["-d", "64", "-b", "3", "-h", "4", "-s", "777", "-window-left", "200",
                                      "-window-right", "30", "-deterministic", "-fp16"],
    "deterministic_d256_packed_bf16": ["-d", "256", "-b", "5", "-h", "4", "-gqa", "2", "-s", "600", "-min-s", "1",
                                       "-layout", "packed", "-deterministic", "-bf16"],
    "deterministic_alibi_d128_bf16": ["-d", "128", "-b", "2", "-h", "4", "-s", "600", "-causal-mask", "-alibi",
                                      "-softcapping-scale-bmm1", "30", "-deterministic", "-bf16"],
    # Smaller head_dims on the next larger kernel.
    "d80_causal_gqa_bf16": ["-d", "80", "-b", "2", "-h", "8", "-gqa", "2", "-s", "555", "-causal-mask", "-bf16"],
    "d40_packed_fp16": ["-d", "40", "-b", "4", "-h", "4", "-s", "400", "-min-s", "1", "-layout", "packed", "-fp16"],
    "d192_window_bf16": ["-d", "192", "-b", "1", "-h", "4", "-s", "700", "-window-left", "150", "-window-right", "20",
                         "-bf16"],
    # nine times the default scale: gradients several times larger, and so their rounding errors
    "large_scale_packed_d80_bf16": ["-d", "80", "-b", "4", "-h", "32", "-s", "1000", "-layout", "packed", "-causal-mask",
                                    "-scale-bmm1", "1.0", "-bf16"],
}


@needs_gpu
@pytest.mark.parametrize("name", list(BACKWARD_RUNS))
def test_fmha_exe_checks_the_backward(name):
    result = fmha("-bwd", *BACKWARD_RUNS[name], "-runs", "3", "-warm-up-runs", "1")
    if result.returncode == 2 and "no backward kernel in this build" in result.stderr:
        pytest.skip("no backward kernel for this device in this build: " + result.stderr.strip().splitlines()[0])
    if result.returncode == 2 and "no deterministic mode" in result.stderr:
        pytest.skip("this build's backward has no deterministic loop (setup.py --no-deterministic-backward)")
    assert result.returncode == 0, result.stdout + result.stderr
    for gradient in ("dQ", "dK", "dV"):
        assert f"Checks {gradient}.....: SUCCESS" in result.stdout, result.stdout
    assert ("Checks rerun..: SUCCESS" in result.stdout) == ("-deterministic" in BACKWARD_RUNS[name]), result.stdout
    assert re.search(r"Elapsed \.+: [\d.]+ us \(backward\), [\d.]+ Tflop/s", result.stdout), result.stdout


@needs_gpu
@pytest.mark.parametrize("name", list(LSE_RUNS))
def test_fmha_exe_checks_the_log_sum_exps(name):
    result = fmha(*LSE_RUNS[name], "-lse", "-runs", "3", "-warm-up-runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checks........: SUCCESS" in result.stdout
    assert "Checks LSE....: SUCCESS" in result.stdout


@needs_gpu
@pytest.mark.parametrize("args, expected", [
    (GPU_RUNS["config3"], r"short-keys variant \(1 query row\(s\) a pass\), 983040 work items .*; keys not split$"),
    (GPU_RUNS["gqa"], r"short-keys variant \(4 query row\(s\) a pass\), 245760 work items .*; keys not split$"),
    # 3 to 8 keys and 3 to 7 rows per KV head beside warp MMAs (2 at d256; up to 12 rows and keys
    # together at d64, 8 at d128 and d256): staged tiles of 2 or 4 KV heads; 3 to 16 keys
    # otherwise: one step of a few-keys variant (d256 up to 2 rows per KV head; beside warp MMAs
    # up to 2 rows), else the tensor-core variant's staged one-step form where the arch has warp
    # MMAs (16 rows a pass for more than 8, at d64 and d256 with the rows as M up to 20 and 18
    # rows and keys); the serving options on long keys: the tensor-core variant where the plain
    # launch takes it
    (SHAPES["mha_d256_s8"].fmha_args(), r"few-keys \(up to 8\) variant \(1 query row\(s\) a pass\), \d+ work items .*; keys not split$"),
    (SHAPES["gqa_s8"].fmha_args(), r"tensor-core staged one-step variant \(8 query row\(s\) a pass\), \d+ work items of 32 lanes; keys not split$"),
    (["-b", "4096", "-h", "32", "-gqa", "8", "-s-q", "1", "-s", "4", "-d", "128"],
     r"tensor-core staged one-step variant \(4 KV heads a tile of 4 query row\(s\) a pass\), 8192 work items of 32 lanes; keys not split$"),
    (GPU_RUNS["short_keys_d256_2_heads_a_tile"],
     r"tensor-core staged one-step variant \(2 KV heads a tile of 8 query row\(s\) a pass\), 2002 work items of 32 lanes; keys not split$"),
    (["-b", "4096", "-h", "32", "-gqa", "16", "-s-q", "1", "-s", "6", "-d", "128"],
     r"few-keys \(up to 8\) variant \(2 query row\(s\) a pass\), 65536 work items of 16 lanes; keys not split$"),
    (SHAPES["gqa_s16"].fmha_args(), r"tensor-core staged one-step variant \(\d+ query row\(s\) a pass\), \d+ work items .*; keys not split$"),
    # one row per KV head up to 16 keys: the wide few-keys range; 12 rows at 3 keys: one staged
    # pass of 16 (staged_row_tiles: up to d128; staged_rows_as_m: at d64 and d256)
    (["-b", "4096", "-h", "16", "-s-q", "1", "-s", "12", "-d", "64"],
     r"few-keys \(up to 16\) variant \(1 query row\(s\) a pass\), 65536 work items of 16 lanes; keys not split$"),
    (["-b", "1024", "-h", "32", "-gqa", "8", "-s-q", "3", "-s", "3", "-d", "64"],
     r"tensor-core staged one-step variant \(rows as M, 16 query row\(s\) a pass\), 8192 work items of 32 lanes; keys not split$"),
    (["-b", "1024", "-h", "32", "-gqa", "8", "-s-q", "3", "-s", "3", "-d", "128"],
     r"tensor-core staged one-step variant \(16 query row\(s\) a pass\), 8192 work items of 32 lanes; keys not split$"),
    (["-b", "1024", "-h", "32", "-gqa", "8", "-s-q", "3", "-s", "3", "-d", "256"],
     r"tensor-core staged one-step variant \(rows as M, 16 query row\(s\) a pass\), 8192 work items of 32 lanes; keys not split$"),
    (SHAPES["long4k_paged16"].fmha_args(), r"tensor-core variant with paged KV \(8 query row\(s\) a pass\), .* merged in shared memory$"),
    (SHAPES["long4k_paged16"].fmha_args() + ["-alibi"],
     r"tensor-core variant with run-time options \(8 query row\(s\) a pass\), .* merged in shared memory$"),
    (SHAPES["long4k"].fmha_args(),
     r"variant \(\d+ query row\(s\) a pass\), \d+ work items .*; keys split \d+ ways .*, \d+ merged in shared memory$"),
    (SHAPES["long32k_b1"].fmha_args(),
     r"keys split \d+ ways .* \d+ partials per row combined through the workspace$"),
    # 3 heads of 77 positions per KV head: two heads share a 192-row tile (and its K/V reads)
    (GPU_RUNS["odd_prefill_causal"], r"^Launch\.+: 12 tiles of 192 query rows on 12 blocks \(2 heads of a GQA group x 77 "
                                      r"positions, sharing each K/V tile\); 1 TMA producer \+ 3 wgmma consumer warpgroups"),
    (["-b", "16", "-h", "16", "-s", "1024", "-d", "128", "-causal-mask"],
     r"^Launch\.+: 2048 tiles of 128 query rows on \d+ blocks; .* each block takes a query block and its mirror image in turn$"),
    (["-b", "1", "-h", "16", "-s", "4096", "-d", "128", "-causal-mask"],
     r"^Launch\.+: 512 tiles of 128 query rows on 512 blocks; .* query blocks that see the most keys first, in sections"),
    # causal d64: 64-key tiles up to 2048 keys, 112 beyond
    (["-b", "1", "-h", "2", "-s", "2048", "-d", "64", "-causal-mask"], r"; keys in tiles of 64 through"),
    (["-b", "1", "-h", "2", "-s", "2049", "-d", "64", "-causal-mask"], r"; keys in tiles of 112 through"),
])
def test_verbose_says_how_the_work_is_divided(args, expected):
    result = fmha(*args, "-v", "1", "-runs", "1", "-warm-up-runs", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    launch = re.search(r"^Launch\.+: .*$", result.stdout, re.M)
    assert launch and re.search(expected, launch.group(0)), result.stdout


@needs_gpu
def test_not_enough_memory_says_how_much():
    result = fmha("-b", "100000", "-h", "64", "-s", "8192", "-d", "256", "-skip-checks")
    assert result.returncode == 3
    assert re.search(r"needs [\d.]+ GiB", result.stderr)


@needs_gpu
@pytest.mark.parametrize("dtype", ["-fp16", "-bf16"])
def test_saved_tensors_check_independently_with_numpy(tmp_path, dtype):
    np = pytest.importorskip("numpy")
    result = fmha("-b", "2", "-h", "4", "-gqa", "2", "-s", "37", "-s-q", "5", "-d", "64", "-causal-mask", dtype,
                  "-lse", "-save-tensors", tmp_path, "-runs", "1")
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "meta.json").read_text())
    q, k, v, o = (np.load(tmp_path / f"{n}.npy").astype(np.float64) for n in "qkvo")
    assert q.shape == (2, 4, 5, 64) and k.shape == (2, 2, 37, 64) and o.shape == q.shape
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # each KV head serves 2 query heads
    scores = np.einsum("bhid,bhjd->bhij", q, k) * meta["scale"]
    i, j = np.arange(5)[:, None], np.arange(37)[None, :]
    scores = np.where(j <= i + 37 - 5, scores, -np.inf)  # bottom-right causal
    row_max = scores.max(-1, keepdims=True)
    p = np.exp(scores - row_max)
    expected = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v)
    tolerance = 2e-3 if dtype == "-fp16" else 1e-2
    assert np.abs(o - expected).max() < tolerance
    lse = np.load(tmp_path / "lse.npy")  # natural log, as FlashAttention returns it
    assert lse.shape == (2, 4, 5) and lse.dtype == np.float32
    assert np.abs(lse - (row_max[..., 0] + np.log(p.sum(-1)))).max() < 1e-4


@needs_gpu
def test_saved_packed_tokens_check_independently_with_numpy(tmp_path):
    """-layout packed saves the tokens as the kernel read them and cu_seqlens: NumPy slices each
    sequence out and checks it, and the LSE [heads, tokens]."""
    np = pytest.importorskip("numpy")
    result = fmha("-b", "4", "-h", "4", "-gqa", "2", "-s", "300", "-min-s", "1", "-d", "64", "-causal-mask", "-lse",
                  "-layout", "packed", "-save-tensors", tmp_path, "-runs", "1")
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "meta.json").read_text())
    q, k, v, o = (np.load(tmp_path / f"{n}.npy").astype(np.float64) for n in "qkvo")
    cu_q, cu_k = np.load(tmp_path / "cu_seqlens_q.npy"), np.load(tmp_path / "cu_seqlens_k.npy")
    lse = np.load(tmp_path / "lse.npy")
    assert cu_q.dtype == np.int32 and cu_q[0] == 0 and cu_q[-1] == q.shape[0] and cu_k[-1] == k.shape[0]
    assert q.shape[1:] == (4, 64) and k.shape[1:] == (2, 64) and lse.shape == (4, q.shape[0])
    for b in range(4):
        qs, ks, vs = q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]], v[cu_k[b]:cu_k[b + 1]]
        len_q, len_k = qs.shape[0], ks.shape[0]
        ks, vs = np.repeat(ks, 2, axis=1), np.repeat(vs, 2, axis=1)
        scores = np.einsum("ihd,jhd->hij", qs, ks) * meta["scale"]
        i, j = np.arange(len_q)[:, None], np.arange(len_k)[None, :]
        scores = np.where(j <= i + len_k - len_q, scores, -np.inf)
        row_max = scores.max(-1, keepdims=True)
        p = np.exp(scores - row_max)
        expected = np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True), vs)
        assert np.abs(o[cu_q[b]:cu_q[b + 1]] - expected).max() < 2e-3, f"sequence {b}"
        assert np.abs(lse[:, cu_q[b]:cu_q[b + 1]] - (row_max[..., 0] + np.log(p.sum(-1)))).max() < 1e-4


@needs_gpu
@pytest.mark.parametrize("dtype", ["-fp16", "-bf16"])
def test_saved_pages_and_options_check_independently_with_numpy(tmp_path, dtype):
    """Softcapping, ALiBi and a paged cache: NumPy follows the saved block table through the
    saved pages and applies the options as FlashAttention states them."""
    np = pytest.importorskip("numpy")
    result = fmha("-b", "3", "-h", "4", "-gqa", "2", "-s", "37", "-s-q", "5", "-d", "64", "-causal-mask", dtype, "-lse",
                  "-alibi", "-softcapping-scale-bmm1", "3", "-paged-kv", "-page-size", "16", "-save-tensors", tmp_path,
                  "-runs", "1")
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["page_size"] == 16 and meta["alibi"] and meta["softcap"] == 3
    q, o = (np.load(tmp_path / f"{n}.npy").astype(np.float64) for n in "qo")
    k_pages, v_pages = (np.load(tmp_path / f"{n}_pages.npy").astype(np.float64) for n in "kv")
    table = np.load(tmp_path / "block_table.npy")
    assert table.shape == (3, 3) and table.dtype == np.int32 and k_pages.shape[1:] == (16, 2, 64)
    assert len(set(table.flatten())) == table.size  # distinct pages ...
    assert (np.diff(table.flatten()) != 1).any()    # ... not in order
    j = np.arange(37)
    k = k_pages[table[:, j // 16], j % 16].transpose(0, 2, 1, 3)  # [b, h_kv, s_kv, d]
    v = v_pages[table[:, j // 16], j % 16].transpose(0, 2, 1, 3)
    assert np.array_equal(k, np.load(tmp_path / "k.npy").astype(np.float64))
    k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    slopes = np.load(tmp_path / "alibi_slopes.npy").astype(np.float64)
    assert np.allclose(slopes, 2.0 ** (-8.0 * np.arange(1, 5) / 4))  # the standard slopes of 4 heads
    scores = np.einsum("bhid,bhjd->bhij", q, k) * meta["scale"]
    scores = 3 * np.tanh(scores / 3)
    i, jj = np.arange(5)[:, None], np.arange(37)[None, :]
    scores = scores - slopes[None, :, None, None] * np.abs(i + 37 - 5 - jj)
    scores = np.where(jj <= i + 37 - 5, scores, -np.inf)
    row_max = scores.max(-1, keepdims=True)
    p = np.exp(scores - row_max)
    expected = np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v)
    tolerance = 2e-3 if dtype == "-fp16" else 1e-2
    assert np.abs(o - expected).max() < tolerance
    lse = np.load(tmp_path / "lse.npy")
    assert np.abs(lse - (row_max[..., 0] + np.log(p.sum(-1)))).max() < 1e-4
