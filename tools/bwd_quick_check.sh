set -o pipefail
export PYTHONUNBUFFERED=1
{ python3 setup.py --only --archs sm90 --head-dims 64 128 --heads gqa --families mmaprefill mmabwd decode &&
  make configure PLATFORM=nvidia PYTHON=python3 &&
  cmake --build build/nvidia --target fmha.exe fmha_gpu_tests -j 16; } > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
E=build/nvidia/fmha.exe
for a in "-d 128 -b 2 -h 8 -gqa 2 -s 1000 -causal-mask -fp16" "-d 128 -b 2 -h 8 -gqa 2 -s 1000 -causal-mask -bf16" \
         "-d 64 -b 3 -h 4 -s 333 -s-q 200 -window-left 50 -window-right 7 -fp16" "-d 128 -b 3 -h 6 -gqa 3 -s 700 -min-s 100 -bf16" \
         "-d 64 -b 1 -h 2 -s 129 -s-q 257 -causal-mask -fp16"; do
  echo "== $a"; timeout 60 $E -bwd $a -runs 5 -v 0 2>&1 | tail -5
done
echo "== timing"; timeout 60 $E -bwd -d 128 -b 4 -h 16 -s 2048 -causal-mask -bf16 -skip-checks -v 0 -runs 20 | tail -2
timeout 60 $E -bwd -d 128 -b 4 -h 16 -s 2048 -bf16 -skip-checks -v 0 -runs 20 | tail -2
timeout 200 build/nvidia/fmha_gpu_tests --gtest_filter='Split*:LongSequences*:*Decode*' 2>&1 | grep -E '^\[  (PASSED|FAILED) |FAILED|Failure' | head
