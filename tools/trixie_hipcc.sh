#!/bin/sh
# The AMD compiler where the system's ROCm does not know gfx942 (Debian 12's 5.2): hipcc 5.7.1
# (clang 17) of the Debian 13 root that `make deps` sets up in $FMHA_CACHE/trixie (tools/deps.sh).
# It runs in that root, inside a private mount namespace in which the project folder, /tmp, the
# working folder and CMake's modules (its compiler checks compile sources there) appear at their
# own paths, so every path CMake passes names the same file inside and out; nothing stays
# mounted afterwards. ccache, installed in the root, caches the compiles in the root's
# /var/cache/ccache, which every clone shares (CCACHE_BASEDIR: the clone's path is not hashed).
# Needs root (unshare, mount, chroot), as `make deps` does.
# Usage: trixie_hipcc.sh HIPCC-ARGS...   (the Makefile makes it the AMD build's compiler)
# FMHA_TRIXIE_TOOL=COMMAND runs that command of the root instead (no ccache): the root's
# clang++-17 builds and runs the MFMA loop's host emulation (fmha_test.py).
set -eu
project=$(cd "$(dirname "$0")/.." && pwd -P)
root=${FMHA_CACHE:-/var/cache/fmha}/trixie
if [ ! -x "$root/usr/bin/hipcc" ]; then
    echo "$0: no hipcc in $root: run \`make deps\` (as root)" >&2
    exit 1
fi
# The dependency file (-MF) names the root's headers as the root sees them; rewritten below to
# where the host sees them, so that Ninja finds them and a second `make` has nothing to do.
depfile= previous=
for arg in "$@"; do [ "$previous" = -MF ] && depfile=$arg; previous=$arg; done
status=0
unshare --mount --propagation private sh -c '
    root=$1 project=$2 cwd=$3
    shift 3
    bind() { mkdir -p "$root$1" && mount --bind "$1" "$root$1"; }
    for dir in /dev /proc /tmp "$project" /usr/share/cmake*; do [ -d "$dir" ] && bind "$dir"; done
    case $cwd in /|/tmp|/tmp/*|"$project"|"$project"/*) ;; *) bind "$cwd" ;; esac
    tool=${FMHA_TRIXIE_TOOL:-hipcc}
    launcher=$([ "$tool" = hipcc ] && test -x "$root/usr/bin/ccache" && echo ccache || true)
    exec chroot "$root" env CCACHE_DIR=/var/cache/ccache CCACHE_BASEDIR="$project" \
        sh -c "cd \"\$1\" && shift && exec $launcher $tool \"\$@\"" sh "$cwd" "$@"
' sh "$root" "$project" "$(pwd -P)" "$@" || status=$?
if [ "$status" -eq 0 ] && [ -n "$depfile" ] && [ -f "$depfile" ]; then
    sed -i -E "s#(^|[[:space:]])/usr/#\1$root/usr/#g" "$depfile"
fi
exit "$status"
