#!/usr/bin/env bash
# One device call: build, optionally run the GPU tests matching $GTEST, then time the headline
# and long-KV decode shapes of benchmarks/shapes.py with fmha.exe, one line each. Peers side by
# side: benchmarks/bench.py.
export PYTHONUNBUFFERED=1
OUT=${OUT:-device-logs}; mkdir -p "$OUT"
(make build JOBS=16 > "$OUT/build.log" 2>&1) || { tail -30 "$OUT/build.log"; exit 1; }
if [ -n "${GTEST:-}" ]; then
    timeout 300 build/nvidia/fmha_gpu_tests --gtest_filter="$GTEST" > "$OUT/gpu.log" 2>&1; echo "gpu_rc=$?"
    grep -E "FAILED|Failure|PASSED" "$OUT/gpu.log" | head -20
fi
shapes=$(python3 benchmarks/shapes.py config3 config4 s2 gqa long4k long32k) || exit 2
while read -r a; do
    bin/fmha.exe $a -v 1 > "$OUT/run.log" 2>&1 < /dev/null
    printf "%-44s %s %s | %s\n" "$a" "$(grep -oE 'Checks\.+: [A-Z]+' "$OUT/run.log" | grep -oE '[A-Z]+$')" \
        "$(grep -E '^Elapsed' "$OUT/run.log" | grep -oE '[0-9.]+ us|[0-9.]+ GB/s' | tr '\n' ' ')" \
        "$(grep -oE 'fmha_fwd_[a-z0-9_]+' "$OUT/run.log" | head -1)"
done <<< "$shapes"
