#!/usr/bin/env bash
# `make test`: on AMD the resource check (tools/resources.py), then pytest fmha_test.py. Their
# full output (the resource table, every item, every skip) goes to BUILD_DIR/test.log; the
# terminal gets a summary (tests/pytest_summary.py): counts per area, skip reasons, failures. The
# log also lists the 25 slowest items (where `make test`'s time goes on the device).
# Usage: run_tests.sh PLATFORM BUILD_DIR PYTHON JOBS. Exit code: pytest's (5, nothing collected, fails too).
set -u
platform=$1 build=$2 python=$3 jobs=$4
log=$build/test.log summary=$build/test-summary.txt
rm -f "$summary"
: > "$log"
if [ "$platform" = amd ]; then
    if ! cmake --build "$build" --target resources -j "$jobs" >> "$log" 2>&1; then
        grep -E "^(resources:|  FAIL|FAILED|ninja: build stopped)" "$log"
        echo "make test: the resource check failed; the table and the compiler's output: $log"
        exit 1
    fi
    grep -E "^resources: [0-9]+ kernel files checked" "$log"
fi
FMHA_BIN_DIR=$build "$python" -m pytest fmha_test.py -v -ra --durations=25 -p tests.pytest_summary --summary-file "$summary" >> "$log" 2>&1
status=$?
if [ -s "$summary" ]; then cat "$summary"; else tail -n 40 "$log"; fi  # no summary: pytest stopped early
echo "make test: the full output (every item, skip reason$([ "$platform" = amd ] && echo " and the resource table")): $log"
exit "$status"
