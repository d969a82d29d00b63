#!/usr/bin/env bash
# A decode change on the short-key grid in one device call: "main" is the working tree, "change"
# the tree with PATCH applied (git diff output). Both build a narrow catalogue (sm90 decode,
# causal; HEAD_DIMS narrows it further); the change's build then runs the fmha.exe checks of
# CHECKS (one argument line each), the decode GPU tests and the unit tests; then
# `decode_steps.py --part short` times the builds in the order change, main, main, change.
# Compare with benchmarks/compare_short_grid.py (best of each build's two runs).
#   HEAD_DIMS=64 CHECKS=my_shapes.txt OUT=logs bash tools/ab_short_grid.sh my.patch
set -uo pipefail
PATCH=$(realpath "$1"); CHECKS=${CHECKS:+$(realpath "$CHECKS")}
OUT=${OUT:-device-logs}; mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
narrow=(--only --archs sm90 --families decode --masks causal ${HEAD_DIMS:+--head-dims $HEAD_DIMS})
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for build in main change; do
    rm -rf "/tmp/ab_$build" && mkdir "/tmp/ab_$build"
    tar --exclude=./bin --exclude=./build --exclude=./generated --exclude=./.git -cf - . | tar -xf - -C "/tmp/ab_$build"
done
(cd /tmp/ab_change && patch -s -p1 < "$PATCH") || { echo "ab_short_grid.sh: $PATCH does not apply" >&2; exit 2; }
for build in main change; do
    (cd "/tmp/ab_$build" && python3 setup.py "${narrow[@]}" > /dev/null && make build JOBS="${JOBS:-16}") > "$OUT/build_$build.log" 2>&1 ||
        { tail -30 "$OUT/build_$build.log"; exit 1; }
done
date -u
cd /tmp/ab_change || exit 1
if [ -n "$CHECKS" ]; then
    passed=0 failed=0
    while read -r line; do
        [ -z "$line" ] && continue
        out=$(bin/fmha.exe $line -runs 2 -warm-up-runs 1 2>&1); rc=$?
        if [ $rc -eq 0 ] && ! grep -q FAILED <<< "$out"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED (rc $rc): $line"; fi
    done < "$CHECKS"
    echo "fmha.exe checks of the change: $passed passed, $failed failed"
fi
timeout 150 bin/fmha_gpu_tests --gtest_filter='*ecode*:SplitKv*:SplitPlan*:GroupWidth*:DeviceReference*' > "$OUT/gpu_tests_change.log" 2>&1
echo "decode GPU tests of the change: rc $? $(grep -E '^\[  PASSED|FAILED TESTS' "$OUT/gpu_tests_change.log" | tr '\n' ' ')"
timeout 60 bin/fmha_unit_tests > "$OUT/unit_tests_change.log" 2>&1
echo "unit tests of the change: rc $? $(grep -E '^\[  PASSED|FAILED TESTS' "$OUT/unit_tests_change.log" | tr '\n' ' ')"
run=0
for build in change main main change; do
    run=$((run + 1))
    (cd "/tmp/ab_$build" && FMHA_LIBRARY="$PWD/bin/libfmha.so" FMHA_BIN_DIR="$PWD/bin" PYTHONPATH=python timeout 200 \
        python3 benchmarks/decode_steps.py --part short ${HEAD_DIMS:+--head-dims $HEAD_DIMS} --out "$OUT/short_${build}_$run.md" > /dev/null 2>&1)
    echo "grid run $run ($build): rc $?"
done
date -u
