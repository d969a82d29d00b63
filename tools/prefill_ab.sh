#!/usr/bin/env bash
# Times fmha.exe binaries against each other on prefill shapes, rounds alternating (one line
# per round, binary and shape: TFLOP/s). usage: prefill_ab.sh ROUNDS BIN... -- SHAPE...
rounds=$1; shift; bins=(); while [ "$1" != "--" ]; do bins+=("$1"); shift; done; shift
for ((r = 1; r <= rounds; r++)); do
    for shape in "$@"; do
        for b in "${bins[@]}"; do
            out=$($b $shape -runs 30 -warm-up-runs 5 2>&1)
            printf 'round %d %-16s %-44s %s %s\n' "$r" "$b" "$shape" "$(grep -oE '[0-9.]+ Tflop/s' <<<"$out")" "$(grep -oE 'Checks\.+: [A-Z]+' <<<"$out" | grep -oE '[A-Z]+$')"
        done
    done
done
