#!/usr/bin/env bash
# `make deps`: installs with apt-get whatever the build and tests need and this machine lacks,
# then names the Python the build uses (tools/python.sh: the same choice `make` makes).
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
need hipcc command -v hipcc
need libamdhip64-dev test -f /usr/include/hip/hip_runtime.h
need rocm-device-libs sh -c 'ls /usr/lib/*/amdgcn/bitcode/ocml.bc || ls /opt/rocm/amdgcn/bitcode/ocml.bc'
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
    # Optional: ccache (faster rebuilds), and the AMD toolchain where nvcc builds the NVIDIA platform.
    for package in "${missing[@]}"; do
        case $package in ccache|hipcc|libamdhip64-dev|rocm-device-libs) ;; *) exit 1 ;; esac
    done
    if [[ " ${missing[*]} " =~ " hipcc "|" libamdhip64-dev "|" rocm-device-libs " ]]; then
        has_nvcc >/dev/null || exit 1
        echo "deps: nvcc is present: the NVIDIA platform can be built"
    fi
fi
has_nvcc >/dev/null || echo "deps: no nvcc (CUDA toolkit): the NVIDIA platform cannot be built here"
if ! python=$(bash tools/python.sh); then
    [ -n "${PYTHON:-}" ] && echo "deps: install the modules into PYTHON=$PYTHON, or unset PYTHON"
    exit 1
fi
echo "deps: the build's Python is $python (it has $(bash tools/python.sh --modules))"
