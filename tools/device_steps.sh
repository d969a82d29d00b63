# Sourced by the device-machine scripts (tools/device_check.sh, tools/serving_check.sh): step
# NAME COMMAND... runs a command with its output in $OUT/NAME.log and adds its exit code and
# seconds to the summary array that the script prints last.
summary=()
step() { # step NAME COMMAND...: runs, logs to $OUT/NAME.log, records the exit code
    local name=$1; shift
    local start=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - start)))")
    return $rc
}
