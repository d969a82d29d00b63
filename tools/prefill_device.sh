#!/usr/bin/env bash
# One device call for the tensor-core prefill family: its checks against the reference on
# awkward shapes, a sanitizer pass, then the issue's shapes timed beside the SDPA backends.
# Expects bin/ built for this machine (or builds it). Logs to $OUT.
set -u
OUT=${OUT:-device-logs}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
[ -x bin/fmha.exe ] || make build JOBS=16 > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
{ nvidia-smi -L; date -u; } | tee "$OUT/machine.log"
check() {  # one fmha.exe run; prints its check line and kernel
    local out; out=$(bin/fmha.exe "$@" -runs 3 -warm-up-runs 1 -v 1 2>&1); local rc=$?
    echo "== $* (rc=$rc)" >> "$OUT/checks.log"; echo "$out" >> "$OUT/checks.log"
    printf '%-62s rc=%s %s %s\n' "$*" "$rc" "$(grep -oE 'Checks\.+: [A-Z]+.*' <<<"$out" | head -1 | cut -c1-60)" \
        "$(grep -oE 'fmha_fwd_[a-z0-9_]+' <<<"$out" | head -1 | sed 's/fmha_fwd_//')"
}
while read -r shape; do [ -n "$shape" ] && check $shape; done <<'SHAPES'
-b 3 -h 8 -s 257 -d 128 -causal-mask
-b 2 -h 8 -gqa 2 -s 300 -s-q 77 -d 64 -causal-mask
-b 2 -h 8 -gqa 2 -s 1000 -d 256 -sliding-window-size 100
-b 2 -h 32 -gqa 4 -s 500 -s-q 9 -d 128
-b 3 -h 8 -mqa -s 200 -s-q 40 -d 96 -bf16 -causal-mask
-b 4 -h 8 -s 700 -min-s 100 -d 128 -causal-mask
-b 2 -h 16 -s 333 -d 128 -layout bshd
-b 2 -h 8 -s 129 -d 64 -layout qkv-packed -bf16 -causal-mask
-b 5000 -h 16 -s 33 -d 64
-b 2 -h 4 -s 100 -s-q 300 -d 128 -causal-mask
-b 1 -h 4 -s 1024 -d 256 -bf16 -causal-mask
-b 2 -h 16 -s 4096 -d 128
SHAPES
compute-sanitizer --tool memcheck --error-exitcode 9 bin/fmha.exe -b 2 -h 8 -gqa 2 -s 300 -s-q 77 -d 64 -causal-mask -runs 1 -warm-up-runs 0 > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"
compute-sanitizer --tool racecheck --error-exitcode 9 bin/fmha.exe -b 2 -h 8 -s 200 -d 128 -causal-mask -runs 1 -warm-up-runs 0 > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"
compute-sanitizer --tool synccheck --error-exitcode 9 bin/fmha.exe -b 2 -h 8 -s 200 -d 128 -causal-mask -runs 1 -warm-up-runs 0 > "$OUT/synccheck.log" 2>&1; echo "synccheck rc=$?"
echo "== timings (fmha.exe -runs 30, TFLOP/s)"
for shape in "-b 2 -h 16 -s 4096 -d 128" "-b 4 -h 32 -s 1024 -d 128 -causal-mask" "-b 2 -h 16 -s 4096 -d 256" \
             "-b 8 -h 16 -s 2048 -d 64 -bf16" "-b 1 -h 16 -s 16384 -d 128" "-b 1 -h 16 -s 16384 -d 128 -causal-mask"; do
    out=$(bin/fmha.exe $shape -runs 30 -warm-up-runs 5 2>&1)
    printf '%-44s %s\n' "$shape" "$(grep -E '^Elapsed' <<<"$out" | cut -c1-90) $(grep -oE 'Checks\.+: [A-Z]+' <<<"$out")"
done
python3 tools/sdpa_peers.py "2 16 16 4096 4096 128 fp16 0" "4 32 32 1024 1024 128 fp16 1" "2 16 16 4096 4096 256 fp16 0" \
    "8 16 16 2048 2048 64 bf16 0" "1 16 16 16384 16384 128 fp16 0" "1 16 16 16384 16384 128 fp16 1" 2>&1 | tee "$OUT/peers.log"
