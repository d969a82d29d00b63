#!/usr/bin/env bash
# `make deps`: installs with apt-get whatever the build and tests need and this machine lacks.
# Machines without a package network (the GPU machine) must already have their platform's tools:
# then only what is missing AND needed is an error.
set -u
missing=()
need() { # need PACKAGE TEST-COMMAND...
    local package=$1; shift
    "$@" >/dev/null 2>&1 || missing+=("$package")
}
has_python_module() {
    for p in /usr/bin/python3 python3; do $p -c "import $1" 2>/dev/null && return 0; done
    return 1
}
need cmake command -v cmake
need ninja-build command -v ninja
need g++ command -v g++
need python3-jinja2 has_python_module jinja2
need python3-pytest has_python_module pytest
need python3-numpy has_python_module numpy
need libgtest-dev test -f /usr/include/gtest/gtest.h
need hipcc command -v hipcc
need libamdhip64-dev test -f /usr/include/hip/hip_runtime.h
need rocm-device-libs sh -c 'ls /usr/lib/*/amdgcn/bitcode/ocml.bc || ls /opt/rocm/amdgcn/bitcode/ocml.bc'

if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: everything is installed"
elif command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && apt-get update -qq &&
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
    echo "deps: installed ${missing[*]}"
else
    echo "deps: could not install ${missing[*]} (no apt-get, not root, or no package network)"
    # Only the AMD toolchain is optional: a machine with nvcc builds the NVIDIA platform.
    for package in "${missing[@]}"; do
        case $package in hipcc|libamdhip64-dev|rocm-device-libs) ;; *) exit 1 ;; esac
    done
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || exit 1
    echo "deps: nvcc is present: the NVIDIA platform can be built"
fi
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "deps: no nvcc (CUDA toolkit): the NVIDIA platform cannot be built here"
fi
