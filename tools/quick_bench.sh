#!/usr/bin/env bash
# One device call: build, optionally run the GPU tests matching $GTEST, then time the headline
# and long-KV decode shapes with fmha.exe, one line each. Peers side by side: benchmarks/bench.py.
export PYTHONUNBUFFERED=1
OUT=${OUT:-device-logs}; mkdir -p "$OUT"
(make build JOBS=16 > "$OUT/build.log" 2>&1) || { tail -30 "$OUT/build.log"; exit 1; }
if [ -n "${GTEST:-}" ]; then
    timeout 300 build/nvidia/fmha_gpu_tests --gtest_filter="$GTEST" > "$OUT/gpu.log" 2>&1; echo "gpu_rc=$?"
    grep -E "FAILED|Failure|PASSED" "$OUT/gpu.log" | head -20
fi
for a in "-b 30720 -d 256 -h 32 -s 2 -s-q 1" "-b 30720 -d 128 -h 32 -s 2 -s-q 1" "-b 30720 -d 256 -h 32 -s 2" \
         "-b 30720 -d 128 -h 32 -gqa 8 -s 2 -s-q 1" "-b 64 -h 32 -gqa 8 -d 128 -s-q 1 -s 4096" \
         "-b 64 -h 32 -gqa 8 -d 128 -s-q 1 -s 32768"; do
    bin/fmha.exe $a -v 1 > "$OUT/run.log" 2>&1
    printf "%-44s %s %s | %s\n" "$a" "$(grep -oE 'Checks\.+: [A-Z]+' "$OUT/run.log" | grep -oE '[A-Z]+$')" \
        "$(grep -E '^Elapsed' "$OUT/run.log" | grep -oE '[0-9.]+ us|[0-9.]+ GB/s' | tr '\n' ' ')" \
        "$(grep -oE 'fmha_fwd_[a-z0-9_]+' "$OUT/run.log" | head -1)"
done
