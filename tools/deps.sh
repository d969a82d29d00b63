#!/usr/bin/env bash
# `make deps`: installs with apt-get whatever the build and tests need and this machine lacks,
# then names the Python the build uses (tools/python.sh: the same choice `make` makes).
# AMD: where the system's hipcc does not know gfx942 and gfx1100 (Debian 12's ROCm 5.2), it sets
# up a Debian 13 root with hipcc 5.7.1 (clang 17) in $FMHA_CACHE/trixie (tools/trixie_root.sh),
# which then builds every AMD target.
# Machines without a package network (the GPU machine) must already have their platform's tools:
# then only what is missing AND needed is an error.
set -u
cd "$(dirname "$0")/.."
missing=()
need() { # need PACKAGE TEST-COMMAND...
    local package=$1; shift
    "$@" >/dev/null 2>&1 || missing+=("$package")
}
has_nvcc() { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; }
need cmake command -v cmake
need ninja-build command -v ninja
need g++ command -v g++
need libgtest-dev test -f /usr/include/gtest/gtest.h
# The AMD compiler: the system's when it knows every AMD target, else the Debian 13 root's.
knows_amd_targets() { # hipcc compiles for every AMD arch of generator/archs.py
    local targets scratch
    targets=$(python3 -c 'from generator.archs import ARCHS
print(" ".join("--offload-arch=" + a.compile_target for a in ARCHS.values() if a.platform == "amd"))') || return 1
    scratch=$(mktemp -d)  # hipcc 5.2 leaves a folder per compile in TMPDIR
    # shellcheck disable=SC2086
    TMPDIR=$scratch hipcc $targets --offload-device-only -x hip -c /dev/null -o "$scratch/probe.o" >/dev/null 2>&1
    local status=$?
    rm -rf "$scratch"
    return $status
}
trixie=${FMHA_CACHE:-/var/cache/fmha}/trixie  # machine-wide: every clone reuses it
if [ -f "$trixie/.fmha-packages" ] || [ -f toolchain/trixie/.fmha-packages ]; then amd=trixie
elif command -v hipcc >/dev/null && knows_amd_targets; then amd=system
else amd=none
fi
[ "$amd" = none ] && need debootstrap command -v debootstrap
need ccache command -v ccache
# No Python has every module: the system's python3 gets the ones it lacks (unless PYTHON names another).
if ! bash tools/python.sh >/dev/null 2>&1 && [ -z "${PYTHON:-}" ]; then
    system_python=$(bash tools/python.sh --system)
    need python3 test -x "$system_python"
    for module in $(bash tools/python.sh --modules); do need "python3-$module" "$system_python" -c "import $module"; done
fi

if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: every package is installed"
elif command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && apt-get update -qq &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
    echo "deps: installed ${missing[*]}"
else
    echo "deps: could not install ${missing[*]} (no apt-get, not root, or no package network)"
    # Optional: ccache (faster rebuilds), and what sets up the AMD toolchain.
    for package in "${missing[@]}"; do
        case $package in ccache|debootstrap) ;; *) exit 1 ;; esac
    done
fi
if [ "$amd" = none ] || [ "$amd" = trixie ]; then  # create it, or top up its packages
    if bash tools/trixie_root.sh; then
        amd=trixie
    else
        echo "deps: no AMD toolchain: the AMD platform cannot be built here"
        has_nvcc >/dev/null || exit 1
        echo "deps: nvcc is present: the NVIDIA platform can be built"
    fi
fi
case $amd in
    system) echo "deps: AMD: $(command -v hipcc) builds every AMD target" ;;
    trixie) echo "deps: AMD: hipcc 5.7.1 of the Debian 13 root $trixie builds every AMD target (tools/trixie_hipcc.sh)" ;;
esac
has_nvcc >/dev/null || echo "deps: no nvcc (CUDA toolkit): the NVIDIA platform cannot be built here"
if ! python=$(bash tools/python.sh); then
    [ -n "${PYTHON:-}" ] && echo "deps: install the modules into PYTHON=$PYTHON, or unset PYTHON"
    exit 1
fi
echo "deps: the build's Python is $python (it has $(bash tools/python.sh --modules))"
