#!/usr/bin/env bash
# The one Python that runs the generator and the tests, chosen alike for `make` and `make deps`:
# $PYTHON when set, else the first of python3 on PATH (a venv, pyenv or conda one) and the
# system's python3, for which apt-get installs python3-<module>, that has every module below.
# Prints its path; when none has them, says what each lacks and exits 1.
# `tools/python.sh --modules` prints the modules, `--system` the system's python3.
MODULES="jinja2 pytest numpy"  # the generator; the tests; the tests' check of -save-tensors output
SYSTEM_PYTHON=${FMHA_SYSTEM_PYTHON:-/usr/bin/python3}  # tests of `make deps` replace it
case ${1:-} in --modules) echo "$MODULES"; exit 0 ;; --system) echo "$SYSTEM_PYTHON"; exit 0 ;; esac
if [ -n "${PYTHON:-}" ]; then candidates=("$PYTHON"); else candidates=(python3 "$SYSTEM_PYTHON"); fi
report=""
for python in "${candidates[@]}"; do
    # find_spec looks a module up without importing it: quick enough for every make run.
    # shellcheck disable=SC2086
    found=$("$python" -c 'import importlib.util as u, sys
lacks = [m for m in sys.argv[1:] if u.find_spec(m) is None]
print("lacks " + " ".join(lacks) if lacks else sys.executable)' $MODULES 2>/dev/null) || found="not found"
    case $found in /*) echo "$found"; exit 0 ;; esac
    report+="${report:+; }$python: $found"
done
echo "no Python with ${MODULES// /, } ($report)" >&2
exit 1
