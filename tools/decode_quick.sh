#!/usr/bin/env bash
# One device call for decode work: a small catalogue (bf16 and fp16 decode at the given head dims,
# GQA/MHA/MQA), fmha.exe and libfmha.so; then the commands in "$@" with FMHA_LIBRARY set.
# Usage (device): bash tools/decode_quick.sh "python3 benchmarks/decode_steps.py --quick" ...
export PYTHONUNBUFFERED=1
OUT=${OUT:-device-logs}; mkdir -p "$OUT"
HEAD_DIMS=${HEAD_DIMS:-128}
{ python3 setup.py --only --archs sm90 --head-dims $HEAD_DIMS --families decode ${SETUP_ARGS:-} &&
  make configure PLATFORM=nvidia PYTHON=python3 &&
  cmake --build build/nvidia --target fmha_shared fmha.exe ${TARGETS:-} -j 16; } > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
export FMHA_LIBRARY=$PWD/build/nvidia/libfmha.so
for command in "$@"; do echo "== $command"; eval "$command"; done
