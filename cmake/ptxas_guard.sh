#!/usr/bin/env bash
# The CUDA compiler launcher: runs one compile, shows what it printed, and fails it where ptxas
# says it serialized wgmma instructions or ignored a register reallocation (its "Potential
# Performance Loss" notes C7508-C7519 are info lines, which fail no build by themselves), or
# where a tensor-core (mmaprefill, mmabwd) kernel spills registers to local memory.
output=$("$@" 2>&1)
status=$?
[ -n "$output" ] && printf '%s\n' "$output" >&2
if [ $status -eq 0 ] && grep -qE '\(C75(0[89]|1[0-9])\)' <<<"$output"; then
    echo "ptxas_guard: the tensor-core code above runs serialized or short of registers; this fails the build" >&2
    exit 1
fi
if [ $status -eq 0 ] && [[ "$*" == *_mmaprefill_* || "$*" == *_mmabwd_* ]] && grep -q 'Registers are spilled' <<<"$output"; then
    echo "ptxas_guard: a tensor-core kernel above spills registers; this fails the build" >&2
    exit 1
fi
exit $status
