#!/usr/bin/env bash
# Decode changes on the short-key grid in one device call: "main" is the working tree, each
# change the tree with its PATCH applied (git diff output; one patch: build "change", several:
# each named after its file). Every build is a narrow catalogue (sm90 decode, causal; HEAD_DIMS
# narrows it further); each change's build then runs the fmha.exe checks of CHECKS (one argument
# line each), the decode GPU tests and the unit tests; then `decode_steps.py --part short` times
# the builds twice, in an order symmetric about the middle (changes, main, main, changes reversed).
# Compare with benchmarks/compare_short_grid.py (best of each build's two runs).
#   HEAD_DIMS=64 CHECKS=my_shapes.txt OUT=logs bash tools/ab_short_grid.sh my.patch [other.patch ...]
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: tools/ab_short_grid.sh PATCH [PATCH ...]" >&2; exit 2; }
CHECKS=${CHECKS:+$(realpath "$CHECKS")}
OUT=${OUT:-device-logs}; mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
narrow=(--only --archs sm90 --families decode --masks causal ${HEAD_DIMS:+--head-dims $HEAD_DIMS})
changes=() patches=()
for patch in "$@"; do
    patches+=("$(realpath "$patch")")
    if [ $# -eq 1 ]; then changes+=(change); else name=$(basename "$patch"); changes+=("${name%.*}"); fi
done
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for build in main "${changes[@]}"; do
    rm -rf "/tmp/ab_$build" && mkdir "/tmp/ab_$build"
    tar --exclude=./bin --exclude=./build --exclude=./generated --exclude=./.git -cf - . | tar -xf - -C "/tmp/ab_$build"
done
for i in "${!changes[@]}"; do
    (cd "/tmp/ab_${changes[$i]}" && patch -s -p1 < "${patches[$i]}") || { echo "ab_short_grid.sh: ${patches[$i]} does not apply" >&2; exit 2; }
done
# The builds run side by side: each one's tail is a few long kernel compiles and serial links.
pids=()
for build in main "${changes[@]}"; do
    (cd "/tmp/ab_$build" && python3 setup.py "${narrow[@]}" > /dev/null && make build JOBS="${JOBS:-16}") > "$OUT/build_$build.log" 2>&1 &
    pids+=($!)
done
builds=(main "${changes[@]}")
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { tail -30 "$OUT/build_${builds[$i]}.log"; exit 1; }
done
date -u
for build in "${changes[@]}"; do
    cd "/tmp/ab_$build" || exit 1
    if [ -n "$CHECKS" ]; then
        passed=0 failed=0
        while read -r line; do
            [ -z "$line" ] && continue
            out=$(bin/fmha.exe $line -runs 2 -warm-up-runs 1 2>&1); rc=$?
            if [ $rc -eq 0 ] && ! grep -q FAILED <<< "$out"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED (rc $rc): $line"; fi
        done < "$CHECKS"
        echo "fmha.exe checks of $build: $passed passed, $failed failed"
    fi
    timeout 150 bin/fmha_gpu_tests --gtest_filter='*ecode*:SplitKv*:SplitPlan*:GroupWidth*:DeviceReference*' > "$OUT/gpu_tests_$build.log" 2>&1
    echo "decode GPU tests of $build: rc $? $(grep -E '^\[  PASSED|FAILED TESTS' "$OUT/gpu_tests_$build.log" | tr '\n' ' ')"
    timeout 60 bin/fmha_unit_tests > "$OUT/unit_tests_$build.log" 2>&1
    echo "unit tests of $build: rc $? $(grep -E '^\[  PASSED|FAILED TESTS' "$OUT/unit_tests_$build.log" | tr '\n' ' ')"
done
reversed=()
for ((i = ${#changes[@]} - 1; i >= 0; i--)); do reversed+=("${changes[$i]}"); done
run=0
for build in "${changes[@]}" main main "${reversed[@]}"; do
    run=$((run + 1))
    (cd "/tmp/ab_$build" && FMHA_LIBRARY="$PWD/bin/libfmha.so" FMHA_BIN_DIR="$PWD/bin" PYTHONPATH=python timeout 200 \
        python3 benchmarks/decode_steps.py --part short ${HEAD_DIMS:+--head-dims $HEAD_DIMS} --out "$OUT/short_${build}_$run.md" > /dev/null 2>&1)
    echo "grid run $run ($build): rc $?"
done
date -u
