#!/bin/sh
# Compiler launcher of the AMD kernels (cmake/amd.cmake): runs the compile, whose stderr holds
# the compiler's resource report (-Rpass-analysis=kernel-resource-usage), into
# REPORT_DIR/<source name>.txt for tools/resources.py, so the report costs no second compile.
# The build log shows that text only when the compile warns or fails.
# Usage: resource_remarks.sh REPORT_DIR COMMAND...   (COMMAND has -c SOURCE)
report_dir=$1
shift
source=
previous=
for arg in "$@"; do
    [ "$previous" = -c ] && source=$arg
    previous=$arg
done
name=$(basename "$source")
report="$report_dir/${name%%.*}.txt"
"$@" 2> "$report"
status=$?
if [ $status -ne 0 ] || grep -q -e "warning:" -e "error:" "$report"; then cat "$report" >&2; fi
exit $status
