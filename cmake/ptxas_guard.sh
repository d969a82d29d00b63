#!/usr/bin/env bash
# The CUDA compiler launcher: runs one compile, shows what it printed, and fails it where ptxas
# notes a "Potential Performance Loss" (serialized wgmma instructions, C7520 among them, or an
# ignored register reallocation: info lines, which fail no build by themselves), or where a
# tensor-core kernel (mmaprefill, mmabwd, decode's mma_attend_kernel and staged_rows_kernel)
# spills registers to local memory.
output=$("$@" 2>&1)
status=$?
[ -n "$output" ] && printf '%s\n' "$output" >&2
if [ $status -eq 0 ] && grep -q 'Potential Performance Loss' <<<"$output"; then
    echo "ptxas_guard: the tensor-core code above runs serialized or short of registers; this fails the build" >&2
    exit 1
fi
if [ $status -eq 0 ] && [[ "$*" == *_mmaprefill_* || "$*" == *_mmabwd_* ]] && grep -q 'Registers are spilled' <<<"$output"; then
    echo "ptxas_guard: a tensor-core kernel above spills registers; this fails the build" >&2
    exit 1
fi
if [ $status -eq 0 ] && grep 'Registers are spilled' <<<"$output" | grep -qE 'mma_attend_kernel|staged_rows_kernel'; then
    echo "ptxas_guard: a decode tensor-core kernel above spills registers; this fails the build" >&2
    exit 1
fi
exit $status
