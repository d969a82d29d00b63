"""The project's test suite, in one pytest run (`make test`):

- the generator's tests (generator/tests);
- every GoogleTest case of the unit, GPU and C ABI binaries, one pytest item each;
- fmha.exe: bad input (no GPU needed) and a matrix of shapes checked against the reference (GPU);
- the Python package (tests/python): its binding of libfmha.so, and its API with PyTorch.

The binaries come from FMHA_BIN_DIR (default bin/). GPU items skip, saying why, when the
machine has no GPU; the Python API's, when PyTorch is missing.
"""
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

from generator.archs import ARCHS
from generator.tests.test_generator import *  # noqa: F401,F403  (the generator's tests)


def _import_tests(path):
    """The test_* functions of a test module given by path (tests/python is no package)."""
    spec = importlib.util.spec_from_file_location(f"fmha_tests_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: value for name, value in vars(module).items() if name.startswith("test_")}


# The Python package's tests: its ctypes binding (no PyTorch needed) and its API (PyTorch, GPU).
for _module in ("test_library.py", "test_torch_api.py"):
    globals().update(_import_tests(Path(__file__).resolve().parent / "tests" / "python" / _module))

REPO = Path(__file__).resolve().parent
BIN = Path(os.environ.get("FMHA_BIN_DIR", REPO / "bin"))
FMHA = BIN / "fmha.exe"


def fmha(*args, timeout=600):
    return subprocess.run([str(FMHA), *map(str, args)], capture_output=True, text=True, timeout=timeout)


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


# ---------------------------------------------------------------- fmha.exe without a GPU

@pytest.mark.parametrize("args, message", [
    (["-bogus"], "unknown flag '-bogus'"),
    (["-b"], "needs a value"),
    (["-b", "two"], "expects an integer"),
    (["-b", "0"], "batch (-b) must be positive"),
    (["-s", "-5"], "seqlen_kv (-s) must be positive"),
    (["-d", "0"], "head_dim (-d) must be positive"),
    (["-h", "32", "-gqa", "5"], "must be a multiple of KV heads"),
    (["-s", "4", "-s-q", "8", "-causal-mask"], "leaves the first 4 query rows"),
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
    (["-d", "96", "-bf16"], "nearest kernels"),
    (["-kernel", "fmha_fwd_fp16_d64_mha_nomask_prefill_gfx1100"], "not in this build's catalogue"),
])
def test_bad_input_exits_2_with_a_message(args, message):
    result = fmha(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "terminate" not in result.stderr


@pytest.mark.parametrize("head_dim", [7, 72, 100, 264, 100000])
def test_head_dim_advice_works_when_pasted(head_dim):
    """The command fmha.exe prints adds the head_dim; where the generator rejects it, no command."""
    result = fmha("-d", head_dim)
    assert result.returncode == 2, result.stdout + result.stderr
    generator = subprocess.run([sys.executable, "setup.py", "--refresh", "--head-dims", str(head_dim), "--list"],
                               cwd=REPO, capture_output=True, text=True)
    command = re.search(r"python3 setup.py (.*) && make$", result.stderr, re.M)
    if generator.returncode != 0:
        assert not command and f"head_dim {head_dim} cannot be generated" in result.stderr, result.stderr
        return
    assert command, result.stderr
    pasted = subprocess.run([sys.executable, "setup.py", *command.group(1).split(), "--list"], cwd=REPO,
                            capture_output=True, text=True)
    assert pasted.returncode == 0, pasted.stderr
    assert any(f"_d{head_dim}_" in name for name in pasted.stdout.split())


def test_a_forced_kernel_that_does_not_fit_says_which_fields():
    name = next(line.split()[0] for line in fmha("-list").stdout.splitlines() if line.startswith("fmha_fwd_"))
    dtype, head_dim = name.split("_")[2], int(name.split("_")[3][1:])
    other = "bf16" if dtype == "fp16" else "fp16"
    result = fmha("-kernel", name, f"-{other}", "-d", head_dim + 8)
    assert result.returncode == 2, result.stdout + result.stderr
    assert (f"cannot run this problem: its dtype is {dtype}, the problem's {other} (-{dtype}); its head_dim is "
            f"{head_dim}, the problem's {head_dim + 8} (-d {head_dim})") in result.stderr
    assert "setup.py" not in result.stderr  # the kernel exists: nothing to regenerate


def test_help_lists_the_flags_and_exits_0():
    result = fmha("-help")
    assert result.returncode == 0
    for flag in ("-s-q", "-gqa", "-causal-mask", "-save-tensors", "-kernel", "bottom-right"):
        assert flag in result.stdout


def test_list_matches_the_generator():
    """The C++ table and the Python catalogue agree on every name (one naming rule)."""
    result = fmha("-list")
    assert result.returncode == 0
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("fmha_fwd_")}
    generated = subprocess.run([sys.executable, "setup.py", "--refresh", "--list"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.split()
    platform = "nvidia" if any(n.endswith("_sm90") for n in listed) else "amd"
    expected = {n for n in generated if n.endswith("_sm90") == (platform == "nvidia")}
    assert listed == expected


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_no_gpu_is_reported_with_exit_3():
    result = fmha("-b", "2", "-h", "2", "-s", "8", "-d", "64")
    assert result.returncode == 3
    # The cause, not a runtime's guess (CUDA's runtime without a driver blames the driver's version).
    assert re.search(r"no GPU found: (no (NVIDIA|AMD GPU) driver|the (NVIDIA|AMD) driver sees no GPU|no access to /dev/kfd)",
                     result.stderr), result.stderr


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
    skipped = {"build", "bin", "generated", ".git", ".pytest_cache"}
    shutil.copytree(REPO, copy, ignore=lambda folder, names: [
        name for name in names if name == "__pycache__" or (Path(folder) == REPO and name in skipped)])
    arch = next(a.name for a in ARCHS.values() if a.platform == PLATFORM)
    run([sys.executable, "setup.py", "--only", "--dtypes", "fp16", "--head-dims", "64", "--heads", "mha", "--masks",
         "nomask", "--families", "decode", "--archs", arch], copy)
    build = copy / "build" / PLATFORM
    run(["make", "configure", f"PLATFORM={PLATFORM}", f"PYTHON={sys.executable}",
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

HEADLINE = ["-b", "30720", "-s", "2", "-fp16"]
GPU_RUNS = {
    "spec_config_1": HEADLINE + ["-s-q", "1", "-d", "256", "-h", "16"],
    "spec_config_2": HEADLINE + ["-s-q", "1", "-d", "128", "-h", "16"],
    "spec_config_3": HEADLINE + ["-s-q", "1", "-d", "256", "-h", "32"],
    "spec_config_4": HEADLINE + ["-s-q", "1", "-d", "128", "-h", "32"],
    "headline_s2": HEADLINE + ["-d", "256", "-h", "32"],
    "headline_gqa": HEADLINE + ["-s-q", "1", "-d", "128", "-h", "32", "-gqa", "8"],
    "headline_bf16_mqa": ["-b", "30720", "-s", "2", "-s-q", "1", "-d", "128", "-h", "16", "-mqa", "-bf16"],
    "odd_prefill_causal": ["-b", "3", "-h", "6", "-gqa", "2", "-s", "333", "-s-q", "77", "-d", "64", "-causal-mask"],
    "prefill_bshd": ["-b", "2", "-h", "8", "-s", "1000", "-d", "128", "-layout", "bshd", "-bf16"],
    "prefill_packed": ["-b", "2", "-h", "4", "-s", "513", "-d", "256", "-layout", "qkv-packed", "-causal-mask"],
    "sliding_window": ["-b", "2", "-h", "4", "-s", "700", "-d", "64", "-sliding-window-size", "100"],
    "variable_lengths": ["-b", "7", "-h", "4", "-s", "300", "-min-s", "1", "-d", "128", "-causal-mask"],
    "long_decode": ["-b", "4", "-h", "8", "-gqa", "2", "-s", "16384", "-s-q", "1", "-d", "128"],
}
# Runs that also ask for the log-sum-exps: each family, and each way the decode family merges
# key splits (none, in shared memory, through the workspace and the combine kernel).
LSE_RUNS = {
    "lse_headline_gqa": GPU_RUNS["headline_gqa"],
    "lse_prefill_varlen_causal": GPU_RUNS["variable_lengths"],
    "lse_prefill_window": GPU_RUNS["sliding_window"],
    "lse_decode_block_merge": ["-b", "64", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "4096"],
    "lse_decode_combine": ["-b", "1", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "32768", "-bf16"],
    "lse_decode_varlen": ["-b", "5", "-h", "8", "-gqa", "2", "-s", "3000", "-s-q", "2", "-min-s", "1", "-d", "256",
                          "-causal-mask"],
}


@needs_gpu
@pytest.mark.parametrize("name", list(GPU_RUNS))
def test_fmha_exe_checks_succeed(name):
    result = fmha(*GPU_RUNS[name], "-runs", "3", "-warm-up-runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checks........: SUCCESS" in result.stdout
    assert re.search(r"Elapsed \.+: [\d.]+ us \([\d.]+x\), [\d.]+ Tflop/s, [\d.]+ GB/s", result.stdout)


@needs_gpu
@pytest.mark.parametrize("name", list(LSE_RUNS))
def test_fmha_exe_checks_the_log_sum_exps(name):
    result = fmha(*LSE_RUNS[name], "-lse", "-runs", "3", "-warm-up-runs", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checks........: SUCCESS" in result.stdout
    assert "Checks LSE....: SUCCESS" in result.stdout


@needs_gpu
@pytest.mark.parametrize("args, expected", [
    (GPU_RUNS["spec_config_3"], r"short-keys variant \(1 query row\(s\) a pass\), 983040 work items .*; keys not split$"),
    (GPU_RUNS["headline_gqa"], r"short-keys variant \(4 query row\(s\) a pass\), 245760 work items .*; keys not split$"),
    (["-b", "64", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "4096"],
     r"variant \(\d+ query row\(s\) a pass\), \d+ work items .*; keys split \d+ ways .*, \d+ merged in shared memory$"),
    (["-b", "1", "-h", "32", "-gqa", "8", "-d", "128", "-s-q", "1", "-s", "32768"],
     r"keys split \d+ ways .* \d+ partials per row combined through the workspace$"),
    # 3 heads of 77 positions per KV head: two heads share a 192-row tile (and its K/V reads)
    (GPU_RUNS["odd_prefill_causal"], r"^Launch\.+: 12 tiles of 192 query rows on 12 blocks \(2 heads of a GQA group x 77 "
                                      r"positions, sharing each K/V tile\); 1 TMA producer \+ 3 wgmma consumer warpgroups"),
    (["-b", "16", "-h", "16", "-s", "1024", "-d", "128", "-causal-mask"],
     r"^Launch\.+: 2048 tiles of 128 query rows on \d+ blocks; .* query blocks that see the most keys first, in sections"),
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
