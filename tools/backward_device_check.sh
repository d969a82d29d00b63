#!/usr/bin/env bash
# The backward on the device in one call: a small sm90 catalogue (the tensor-core forward and the
# backward kernels, gqa), libfmha.so only, the Python backward tests, benchmarks/training.py, the
# torch.compile and CUDA-graph tests, and compute-sanitizer memcheck and racecheck of one backward, each
# bounded so that the whole ends within BUDGET seconds. Logs under $OUT.
#   BUDGET=270 bash tools/backward_device_check.sh [benchmark args...]
set -u -o pipefail
OUT=${OUT:-/tmp/fmha-out}
BUDGET=${BUDGET:-270}
mkdir -p "$OUT"
left() { echo $((BUDGET - SECONDS > 5 ? BUDGET - SECONDS : 5)); }
python3 setup.py --only --archs sm90 --head-dims 64 128 256 --heads gqa --families mmaprefill mmabwd >"$OUT/setup.log" 2>&1 &&
  make configure PLATFORM=nvidia PYTHON=python3 >"$OUT/build.log" 2>&1 &&
  cmake --build build/nvidia --target fmha_shared -j 16 >>"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $SECONDS s"
export FMHA_LIBRARY=$PWD/build/nvidia/libfmha.so PYTHONUNBUFFERED=1
tests() { timeout "$1" python3 -m pytest -q -p no:cacheprovider tests/python/test_torch_api.py -k "$2" 2>&1; }
tests 100 "backward or autograd" | tee "$OUT/pytest_backward.log" | grep -E "Error|error|passed|failed|^FAILED" | head -30
echo "tests: $SECONDS s"
timeout "$(( $(left) - 60 ))" python3 benchmarks/training.py "$@" 2>&1 | tee "$OUT/training.log"
echo "benchmark: $SECONDS s"
tests "$(( $(left) - 25 ))" "compile_fullgraph or cuda_graph" | tee "$OUT/pytest_compile.log" | tail -3
cat >/tmp/one_backward.py <<'PY'
import sys, torch
sys.path.insert(0, "python")
import fmha
q = torch.randn(1, 77, 4, 64, dtype=torch.float16, device="cuda", requires_grad=True)
k, v = (torch.randn(1, 100, 2, 64, dtype=torch.float16, device="cuda", requires_grad=True) for _ in range(2))
fmha.flash_attn_func(q, k, v, causal=True, strict=True).sum().backward()
torch.cuda.synchronize()
print("one backward: finite", bool(torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()))
PY
for tool in memcheck racecheck; do timeout "$(( $(left) / 2 ))" compute-sanitizer --tool $tool python3 /tmp/one_backward.py 2>&1 |
  tee "$OUT/$tool.log" | tail -3; done
echo "total: $SECONDS s"
