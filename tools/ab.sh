#!/usr/bin/env bash
# Builds compared in one device call: how the "old and new builds alternating" numbers of
# docs/decisions.md are taken (tools/prefill_ab.sh compares ready-built binaries instead). The working tree builds as "tree"; each NAME=DIR in $VERSIONS is the tree with the
# files under DIR laid over it at the same relative paths (DIR/src/kernels/decode/tensor_core.h
# replaces src/kernels/decode/tensor_core.h). Each round runs every build once per shape, builds alternating, so
# that drift of the device shows in all of them. One line per build and shape: the rounds'
# times in us, "!" and the verdict after a run whose checks did not pass.
#   mkdir -p old/src/kernels/decode && git show HEAD:src/kernels/decode/tensor_core.h > old/src/kernels/decode/tensor_core.h
#   VERSIONS="base=old" SHAPES="$(python3 benchmarks/shapes.py long4k)" ROUNDS=5 bash tools/ab.sh
set -uo pipefail
OUT=${OUT:-device-logs}; mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
SHAPES=${SHAPES:-$(python3 benchmarks/shapes.py long4k long32k | paste -sd';')}  # ';' between shapes
nvidia-smi -L 2>/dev/null; date -u
# An overlay file must replace a file of the tree: one at another path would change nothing.
for version in ${VERSIONS:-}; do
    overlay=${version#*=}
    [ -d "$overlay" ] || { echo "ab.sh: $overlay: no such directory" >&2; exit 2; }
    while IFS= read -r file; do
        [ -f "${file#"$overlay"/}" ] || { echo "ab.sh: $file replaces no file of the tree (${file#"$overlay"/})" >&2; exit 2; }
    done < <(find "$overlay" -type f)
done
# The builds run side by side (a device call is short); each waits for nothing but itself.
make build JOBS="${JOBS:-16}" > "$OUT/build_tree.log" 2>&1 &
declare -A BIN=([tree]=bin/fmha.exe) PID=([tree]=$!)
NAMES=(tree)
for version in ${VERSIONS:-}; do
    name=${version%%=*} overlay=${version#*=} copy=/tmp/fmha_ab_$name
    rm -rf "$copy" && mkdir -p "$copy"
    tar --exclude=./build --exclude=./bin --exclude=./.git -cf - . | tar -xf - -C "$copy"
    cp -r "$overlay"/. "$copy"/
    (cd "$copy" && make configure && cmake --build build/* --target fmha.exe -j "${JOBS:-16}") > "$OUT/build_$name.log" 2>&1 &
    PID[$name]=$!
    NAMES+=("$name")
done
BUILT=()  # a version whose build fails is reported and left out
for name in "${NAMES[@]}"; do
    if wait "${PID[$name]}"; then
        BUILT+=("$name")
        [ "$name" = tree ] || BIN[$name]=$(ls "/tmp/fmha_ab_$name"/build/*/fmha.exe)
    else
        echo "ab.sh: $name did not build:"; grep -m3 -E "error|spill" "$OUT/build_$name.log" || tail -5 "$OUT/build_$name.log"
    fi
done
NAMES=("${BUILT[@]}")
[ ${#NAMES[@]} -gt 0 ] || exit 1

IFS=';' read -ra shapes <<< "$SHAPES"
for shape in "${shapes[@]}"; do
    declare -A line=()
    for name in "${NAMES[@]}"; do line[$name]=$(printf '%-8s %-48s' "$name" "$shape"); done
    for _ in $(seq "${ROUNDS:-3}"); do
        for name in "${NAMES[@]}"; do
            run=$(${BIN[$name]} $shape -runs "${RUNS:-100}" 2>&1)
            verdict=$(grep -oE 'Checks\.+: [A-Z]+' <<< "$run" | grep -oE '[A-Z]+$')
            us=$(grep -E '^Elapsed' <<< "$run" | grep -oE '[0-9.]+ us' | grep -oE '[0-9.]+')
            [ "$verdict" = SUCCESS ] || us="${us:-none}!${verdict:-no-verdict}"
            line[$name]+=" $us"
        done
    done
    for name in "${NAMES[@]}"; do echo "${line[$name]}"; done
done | tee "$OUT/ab.txt"
