#!/usr/bin/env bash
# One call on the GPU machine for the Python API (issue 15), from the repository root:
#   OUT=/some/folder bash tools/python_device_check.sh
# builds (make), installs the package from this tree with pip (offline), checks that the
# installed copy is what imports, runs the Python API's, the binding's and the C ABI's tests
# (pytest fmha_test.py -k ...), a compute-sanitizer memcheck of Python calls, the per-call
# overhead benchmark, and then the whole `make test`. Every step logs with `set -x` to $OUT/<step>.log (default ./device-logs)
# and the next step runs whatever happened; a summary prints last; the exit code is non-zero
# when any step failed. SKIP_FULL_TEST=1 leaves out the whole `make test`.
set -u -o pipefail
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
failed=0
summary=()
step() { # step NAME COMMAND...: runs it traced into $OUT/NAME.log and records its exit code
    local name=$1; shift
    local start=$SECONDS
    ( set -x; "$@" ) > "$OUT/$name.log" 2>&1
    local rc=$?
    [ "$rc" -eq 0 ] || failed=1
    summary+=("$(printf '%-18s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - start)))")
    return "$rc"
}
(
    set -x
    nvidia-smi; date -u; uname -a; git log -1 --oneline; git status --short | head -20
    "$PYTHON" -c "import sys, torch; print(sys.executable, sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
    "$PYTHON" -m pip --version
    "$PYTHON" -c "import setuptools; print('setuptools', setuptools.__version__)"
    "$PYTHON" -c "import wheel; print('wheel', wheel.__version__)"
) > "$OUT/machine.log" 2>&1

step build make JOBS=16 PYTHON="$PYTHON"

# The README's install command, in a virtual environment that sees this Python's packages
# (a system Python refuses pip installs, PEP 668); where that environment cannot import torch
# (this Python is itself a venv), pip's --target with PYTHONPATH instead.
TEST_PYTHON=$PYTHON
if "$PYTHON" -m venv --without-pip --system-site-packages "$WORK/venv" > "$OUT/venv.log" 2>&1 &&
   "$WORK/venv/bin/python" -c "import torch, pip" >> "$OUT/venv.log" 2>&1; then
    TEST_PYTHON=$WORK/venv/bin/python
    step install "$TEST_PYTHON" -m pip install --no-index --no-build-isolation --no-deps ./python
else
    step install "$PYTHON" -m pip install --no-index --no-build-isolation --no-deps --target "$WORK/site" ./python
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The installed package, not the tree's python/, is what `import fmha` finds, with its own library.
cat > "$WORK/installed.py" <<PY
import pathlib, fmha, fmha._library as library
package, loaded = pathlib.Path(fmha.__file__).parent, pathlib.Path(library.load().path)
print("package", package, "library", loaded)
assert package != pathlib.Path("$PWD/python/fmha"), "the in-tree package was imported, not the installed one"
assert loaded.parent.parent == package, "the library is not the installed package's own"
PY
step installed sh -c "cd '$WORK' && '$TEST_PYTHON' installed.py"
step pytest_python env FMHA_BIN_DIR=bin "$TEST_PYTHON" -m pytest fmha_test.py -ra -v -k "test_torch_ or test_python_ or test_capi"
# On this machine nothing of the Python API may skip for want of PyTorch or a GPU.
step no_skips sh -c "! grep -E 'SKIPPED.*(PyTorch is not installed|PyTorch sees no CUDA GPU|import fmha failed)' '$OUT/pytest_python.log'"
step sanitizer compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST_PYTHON" -c '
import torch, fmha
h = dict(dtype=torch.float16, device="cuda")
q, k, v = torch.randn(2, 77, 8, 64, **h), torch.randn(2, 300, 2, 64, **h), torch.randn(2, 300, 2, 64, **h)
fmha.flash_attn_func(q, k, v, causal=True, return_lse=True, strict=True)
q1, kc, vc = torch.randn(1, 1, 8, 128, **h), torch.randn(1, 5000, 2, 128, **h), torch.randn(1, 5000, 2, 128, **h)
lengths = torch.tensor([4000], dtype=torch.int32, device="cuda")
fmha.flash_attn_with_kvcache(q1, kc, vc, torch.randn(1, 1, 2, 128, **h), torch.randn(1, 1, 2, 128, **h), cache_seqlens=lengths, strict=True)
cu = torch.tensor([0, 5, 40], dtype=torch.int32, device="cuda")
x = torch.randn(40, 8, 128, **h)
fmha.flash_attn_varlen_func(x, x, x, cu, cu, 35, 35, causal=True, return_lse=True, strict=True)
torch.cuda.synchronize(); print("calls done")
'
step benchmark "$TEST_PYTHON" benchmarks/python_overhead.py --out "$OUT/python_overhead.md" --fmha bin/fmha.exe
if [ "${SKIP_FULL_TEST:-0}" != 1 ]; then
    step make_test make test JOBS=16  # the Python make chooses, as a user's `make test`
fi
rm -rf "$WORK"

{
    grep -E "^=+ .*(passed|failed|error)" "$OUT/pytest_python.log" | tail -1 | sed 's/^/pytest (Python API): /'
    [ -f "$OUT/make_test.log" ] && grep -E "^pytest: [0-9]+ passed" "$OUT/make_test.log" | sed 's/^/make test: /'
    grep -h "ERROR SUMMARY" "$OUT/sanitizer.log"
    printf '%s\n' "${summary[@]}"
} > "$OUT/summary.txt"
cat "$OUT/python_overhead.md" 2>/dev/null
grep -E "^(FAILED|ERROR)" "$OUT/pytest_python.log" | head -20
cat "$OUT/summary.txt"
[ "$failed" -eq 0 ] && echo "python_device_check: all steps passed" || echo "python_device_check: some step FAILED (see $OUT)"
exit "$failed"
