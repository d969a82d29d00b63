#!/usr/bin/env bash
# The backward on the device: fmha.exe -bwd checks on odd shapes (packed batches too), compute-sanitizer memcheck, racecheck
# and synccheck of d64/d128/d256 launches, the Python backward and dropout tests; BENCH=1 adds
# three training cases. Logs under $OUT. On the device: `[BENCH=1] bash tools/bwd_quick_check.sh`.
set -o pipefail
export PYTHONUNBUFFERED=1
S=$SECONDS
{ python3 setup.py --only --archs sm90 --head-dims 64 128 256 --heads gqa --families mmaprefill mmabwd &&
  make configure PLATFORM=nvidia PYTHON=python3 &&
  cmake --build build/nvidia --target fmha.exe fmha_shared -j 16; } > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build: $((SECONDS-S)) s"; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
E=build/nvidia/fmha.exe
fails=0
while IFS= read -r a; do
  out=$(timeout 60 $E -bwd $a -runs 2 -v 0 2>&1); n=$(grep -c "Checks.*SUCCESS" <<<"$out")
  if [ "$n" != 3 ]; then fails=$((fails+1)); echo "FAIL $a"; grep -E "Checks|rror" <<<"$out" | head -4; else echo "ok   $a"; fi
done <<'LIST'
-d 128 -b 2 -h 8 -gqa 2 -s 1000 -causal-mask -fp16
-d 128 -b 2 -h 8 -gqa 2 -s 1000 -causal-mask -bf16
-d 64 -b 3 -h 4 -s 333 -s-q 200 -window-left 50 -window-right 7 -fp16
-d 128 -b 3 -h 6 -gqa 3 -s 700 -min-s 100 -bf16
-d 64 -b 1 -h 2 -s 129 -s-q 257 -causal-mask -fp16
-d 128 -b 2 -h 4 -s 300 -fp16
-d 64 -b 2 -h 8 -gqa 8 -s 517 -bf16
-d 64 -b 2 -h 8 -gqa 4 -s 70 -s-q 33 -causal-mask -fp16
-d 128 -b 1 -h 6 -gqa 3 -s 2 -s-q 1 -bf16
-d 128 -b 2 -h 4 -gqa 2 -s 65 -s-q 191 -causal-mask -bf16
-d 64 -b 3 -h 3 -s 777 -s-q 129 -window-left 100 -window-right 0 -bf16
-d 128 -b 4 -h 8 -gqa 4 -s 513 -min-s 1 -causal-mask -fp16
-d 64 -b 70000 -h 2 -gqa 2 -s 9 -s-q 5 -fp16
-d 256 -b 2 -h 4 -gqa 2 -s 150 -s-q 77 -causal-mask -bf16
-d 256 -b 1 -h 2 -s 65 -s-q 130 -fp16
-d 256 -b 3 -h 4 -gqa 4 -s 300 -min-s 50 -window-left 40 -window-right 5 -fp16
-d 128 -b 7 -h 6 -gqa 3 -s 300 -min-s 1 -layout packed -causal-mask -bf16
-d 64 -b 5 -h 4 -s 190 -min-s 3 -layout packed -fp16
-d 256 -b 4 -h 2 -s 150 -min-s 1 -layout packed -causal-mask -bf16
-d 128 -b 9 -h 4 -gqa 4 -s 700 -s-q 300 -min-s 1 -layout packed -window-left 60 -window-right 9 -fp16
-d 128 -b 2 -h 8 -gqa 4 -s 700 -s-q 333 -causal-mask -softcapping-scale-bmm1 5 -bf16
-d 64 -b 3 -h 4 -s 500 -min-s 50 -alibi -fp16
-d 256 -b 2 -h 8 -gqa 2 -s 1000 -causal-mask -softcapping-scale-bmm1 50 -bf16
-d 256 -b 4 -h 4 -gqa 2 -s 300 -min-s 1 -layout packed -causal-mask -softcapping-scale-bmm1 10 -alibi -dropout 0.2 -bf16
-d 128 -b 3 -h 4 -s 257 -s-q 100 -alibi -softcapping-scale-bmm1 3 -fp16
-d 64 -b 2 -h 4 -s 400 -window-left 90 -window-right 20 -softcapping-scale-bmm1 2 -fp16
LIST
echo "checks: $fails failed ($((SECONDS-S)) s)"
for tool in memcheck racecheck synccheck; do
  for a in "-d 128 -b 1 -h 4 -gqa 2 -s 300 -s-q 200 -causal-mask -bf16" "-d 64 -b 2 -h 2 -s 150 -min-s 60 -fp16" "-d 256 -b 1 -h 2 -s 200 -s-q 100 -causal-mask -bf16" "-d 128 -b 5 -h 4 -gqa 2 -s 200 -min-s 1 -layout packed -causal-mask -bf16" \
           "-d 256 -b 2 -h 2 -s 150 -min-s 20 -causal-mask -softcapping-scale-bmm1 5 -alibi -bf16"; do
    timeout 120 compute-sanitizer --tool $tool $E -bwd $a -runs 1 -v 0 > $OUT/$tool.log 2>&1; echo "$tool $a: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | head -1)"
  done
done
echo "sanitizers: $((SECONDS-S)) s"
export FMHA_LIBRARY=$PWD/build/nvidia/libfmha.so
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_torch_api.py tests/python/test_dropout.py -k "backward or autograd or derivative or dropout or compile or graph or varlen or softcap or alibi" 2>&1 | tail -4
echo "total: $((SECONDS-S)) s"
[ -n "$BENCH" ] && timeout 150 python3 benchmarks/training.py --rounds 3 --runs 5 --cases b2_s4k_h8_d256_causal b4_s2k_h16_d128 b4_s2k_h16_d128_causal 2>&1 | grep "^|\|failed"
