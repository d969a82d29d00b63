#!/usr/bin/env bash
# One call on the GPU machine: build, the whole test suite, the SPEC runs, the sanitizers and
# a regeneration for a new head_dim. Logs go to $OUT (or ./device-logs); a summary prints last.
set -u
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
. "$(dirname "$0")/device_steps.sh"
{ nvidia-smi; date -u; uname -a; } > "$OUT/machine.log" 2>&1
step build make JOBS=16
step test make test JOBS=16
# the everyday command and the SPEC's four configs (benchmarks/shapes.py)
spec_runs=$(python3 benchmarks/shapes.py s2 config1 config2 config3 config4) || exit 2
while read -r run; do
    echo "== bin/fmha.exe $run" >> "$OUT/spec_runs.log"
    bin/fmha.exe $run >> "$OUT/spec_runs.log" 2>&1 < /dev/null
    echo "rc=$?" >> "$OUT/spec_runs.log"
done <<< "$spec_runs"
summary+=("spec_runs: $(grep -c 'Checks........: SUCCESS' "$OUT/spec_runs.log")/$(wc -l <<< "$spec_runs") SUCCESS")
SMALL="-b 3 -h 8 -gqa 2 -s 300 -s-q 77 -d 128 -causal-mask -runs 1 -warm-up-runs 0"
sanitize() { # sanitize TOOL COMMAND...: appends to sanitizers.log
    echo "== compute-sanitizer --tool $*" >> "$OUT/sanitizers.log"
    compute-sanitizer --tool "$@" >> "$OUT/sanitizers.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-22s rc=%s' "sanitizer $1" "$rc")")
}
sanitize memcheck --error-exitcode 9 bin/fmha.exe $SMALL
sanitize racecheck --error-exitcode 9 bin/fmha.exe $SMALL
sanitize synccheck --error-exitcode 9 bin/fmha.exe $SMALL
sanitize memcheck --error-exitcode 9 bin/fmha.exe -b 300 -h 16 -s 2 -s-q 1 -d 256 -runs 1 -warm-up-runs 0
# split key ranges merged in blocks (shared memory) and across them (the workspace, launched
# twice on one); then in blocks alone, on the CUDA-core variant
SPLIT="-b 2 -h 8 -gqa 2 -s 5000 -s-q 1 -d 128 -runs 2 -warm-up-runs 0"
sanitize memcheck --error-exitcode 9 bin/fmha.exe $SPLIT
sanitize racecheck --error-exitcode 9 bin/fmha.exe $SPLIT
sanitize racecheck --error-exitcode 9 bin/fmha.exe -b 2 -h 8 -gqa 2 -s 250 -s-q 1 -d 256 -runs 1 -warm-up-runs 0
sanitize racecheck --error-exitcode 9 bin/fmha_gpu_tests --gtest_filter=GroupWidth.*
# the tensor-core prefill family: packed GQA heads, a window, d256 (output staged in Q's rows),
# and a persistent causal launch (several tiles per block)
TC="-runs 1 -warm-up-runs 0 -lse"
for tc in "-b 2 -h 8 -gqa 2 -s 300 -s-q 77 -d 64 -causal-mask" "-b 2 -h 4 -s 1000 -d 256 -sliding-window-size 100" \
          "-b 40 -h 8 -s 512 -d 128 -causal-mask"; do
    for tool in memcheck racecheck synccheck; do sanitize $tool --error-exitcode 9 bin/fmha.exe $tc $TC; done
done
# the run-time options (softcapping, ALiBi, a paged cache of 16-key pages): the tensor-core
# decode variant with split keys, the short-keys variant, the CUDA-core prefill family
OPTIONS="-runs 1 -warm-up-runs 0 -lse -alibi -softcapping-scale-bmm1 5 -paged-kv -page-size 16"
for run in "-b 2 -h 8 -gqa 2 -s 5000 -s-q 1 -d 128" "-b 300 -h 8 -s 2 -s-q 1 -d 256" \
           "-b 2 -h 4 -s 300 -s-q 77 -d 64 -causal-mask"; do
    sanitize memcheck --error-exitcode 9 bin/fmha.exe $run $OPTIONS
done
sanitize racecheck --error-exitcode 9 bin/fmha.exe -b 2 -h 8 -gqa 2 -s 5000 -s-q 1 -d 128 $OPTIONS
step regen96 sh -c "python3 setup.py --head-dims 96 && make JOBS=16 && bin/fmha.exe -d 96 -b 4 -h 8 -s 257 -causal-mask && bin/fmha.exe -d 96 -b 30720 -h 16 -s 2 -s-q 1 -gqa 4"
python3 setup.py > /dev/null  # back to the default catalogue
grep -E "^pytest: [0-9]+ passed" "$OUT/test.log" >> "$OUT/summary.txt"  # make test's summary line
printf '%s\n' "${summary[@]}" >> "$OUT/summary.txt"
grep -h -E "^(Device|Kernel|Checks|Elapsed|Average)" "$OUT/spec_runs.log" | head -12
grep -h -E "^== compute|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizers.log"
grep -h -E "^(Kernel|Checks)" "$OUT/regen96.log"
cat "$OUT/summary.txt"
