#!/usr/bin/env bash
# One call on the GPU machine for the serving paths (packed batches, the serving options of the
# tensor-core family): build, tests, compute-sanitizer on packed and option launches, the
# serving-prefill benchmark and prefill sweep cases. Logs go to $OUT (or ./device-logs); a
# summary prints last.
# Usage: tools/serving_check.sh [--quick] [--sweep CASE...]
#   --quick: the GPU GoogleTests and the packed/serving fmha.exe and Python tests instead of
#            `make test`, and fewer sanitizer runs
#   --sweep: these cases of benchmarks/bench.py (`prefill`: all of them)
# SERVING_PARTS: the parts of benchmarks/serving_prefill.py to run (default: all)
set -u
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
quick= sweep=()
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=1 ;;
        --sweep) shift; while [ $# -gt 0 ] && [[ $1 != --* ]]; do sweep+=("$1"); shift; done; continue ;;
    esac
    shift
done
. "$(dirname "$0")/device_steps.sh"
{ nvidia-smi; date -u; } > "$OUT/machine.log" 2>&1
step build make PLATFORM=nvidia JOBS=16 || { tail -40 "$OUT/build.log"; exit 1; }
if [ -n "$quick" ]; then
    step gtest_gpu bin/fmha_gpu_tests
    step gtest_unit bin/fmha_unit_tests
    step pytest_serving python3 -m pytest fmha_test.py -q -k "packed or serving or varlen or kvcache"
    step pytest_torch_serving python3 -m pytest tests/python/test_torch_api.py -q -k "paged or varlen or kvcache or pages"
else
    step test make test PLATFORM=nvidia JOBS=16
    cp build/nvidia/test.log "$OUT/pytest_full.log" 2>/dev/null
fi
sanitize() { # sanitize TOOL FMHA-FLAGS...: appends to sanitizers.log
    echo "== compute-sanitizer --tool $*" >> "$OUT/sanitizers.log"
    compute-sanitizer --tool "$1" --error-exitcode 9 bin/fmha.exe "${@:2}" -runs 1 -warm-up-runs 0 -lse >> "$OUT/sanitizers.log" 2>&1
    summary+=("$(printf '%-28s rc=%s' "sanitizer $1" "$?")")
}
runs=("-b 9 -h 8 -gqa 2 -s 777 -min-s 1 -d 128 -causal-mask -layout packed"
      "-b 2 -h 8 -s 1000 -d 64 -softcapping-scale-bmm1 30 -alibi"
      "-b 3 -h 8 -gqa 4 -s 1000 -s-q 300 -min-s 1 -d 128 -causal-mask -paged-kv -page-size 16")
[ -n "$quick" ] || runs+=("-b 20 -h 32 -gqa 8 -s 40 -min-s 1 -d 64 -layout packed"
                          "-b 6 -h 8 -gqa 4 -s 700 -min-s 1 -d 256 -layout packed -causal-mask -alibi -bf16")
for run in "${runs[@]}"; do
    for tool in memcheck racecheck synccheck; do sanitize $tool $run; done
done
sanitize memcheck -b 33 -h 16 -gqa 4 -s 3000 -s-q 2 -min-s 1 -d 128 -causal-mask -layout packed
sanitize memcheck -b 5 -h 4 -s 500 -min-s 1 -d 64 -causal-mask -layout packed -paged-kv -page-size 32
step python_install bash tools/python_install_check.sh
step serving_prefill python3 benchmarks/serving_prefill.py --out "$OUT/serving_prefill.md" --parts ${SERVING_PARTS:-packed options paged}
[ ${#sweep[@]} -eq 0 ] || step prefill_sweep python3 benchmarks/bench.py --cases "${sweep[@]}" --out "$OUT/prefill_sweep.md"
grep -hE "passed|failed|PASSED|FAILED" "$OUT"/test.log "$OUT"/gtest_*.log "$OUT"/pytest_*.log 2>/dev/null | tail -12
cat "$OUT/serving_prefill.md" 2>/dev/null
[ -f "$OUT/prefill_sweep.md" ] && grep "^|" "$OUT/prefill_sweep.md"
printf '%s\n' "${summary[@]}"
