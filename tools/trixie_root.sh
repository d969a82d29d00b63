#!/usr/bin/env bash
# Sets up, or tops up, the Debian 13 (trixie) root in $FMHA_CACHE/trixie (/var/cache/fmha:
# outside the clone, so every clone on the machine shares it and its ccache) whose hipcc 5.7.1
# (clang 17) builds every AMD target where the system's ROCm does not know gfx942 (Debian 12's
# 5.2). Packages of Debian 13 would replace Debian 12's C library if installed into the system;
# in their own root they stay apart. tools/trixie_hipcc.sh runs the compiler there.
# An existing root is reused; .fmha-packages records what is installed in it, so a changed list
# installs only the difference. Needs root, debootstrap and a package network (about 3.5 min).
# Mirror: FMHA_DEBIAN_MIRROR, else the system's Debian mirror, else deb.debian.org.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${FMHA_CACHE:-/var/cache/fmha}
root=$cache/trixie
# The compiler and its device libraries; GoogleTest for the test binaries; ccache for rebuilds.
packages="hipcc libamdhip64-dev rocm-device-libs-17 libgtest-dev ccache"

if [ ! -f "$root/.fmha-packages" ] && [ -f toolchain/trixie/.fmha-packages ]; then
    # A root an older checkout set up inside the clone: hard links, so no copy and no download.
    echo "deps: reusing toolchain/trixie for $root"
    mkdir -p "$cache" && rm -rf "$root.partial" && cp -al toolchain/trixie "$root.partial" && mv "$root.partial" "$root"
fi
if [ -f "$root/.fmha-packages" ] && [ "$(cat "$root/.fmha-packages")" = "$packages" ]; then
    exit 0
fi
for tool in debootstrap chroot unshare; do
    command -v "$tool" >/dev/null || { echo "trixie_root: $tool is missing" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "trixie_root: needs root (debootstrap, chroot)" >&2; exit 1; }

if [ ! -f "$root/.fmha-packages" ]; then
    mirror=${FMHA_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)\/* *$/\1/p' \
        /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)}
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "deps: setting up a Debian 13 root for hipcc 5.7.1 in $root from $mirror (a few minutes)"
    rm -rf "$root.partial"  # what an interrupted run left
    mkdir -p "$cache"
    if ! debootstrap --variant=minbase trixie "$root.partial" "$mirror" > "$cache/debootstrap.log" 2>&1; then
        echo "trixie_root: debootstrap failed: $cache/debootstrap.log says why" >&2
        rm -rf "$root.partial"
        exit 1
    fi
    mv "$root.partial" "$root"
fi
echo "deps: installing $packages in $root"
chroot "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends $packages >/dev/null" 2>&1 | grep -v "Can not write log" || true
chroot "$root" sh -c "dpkg -s $packages >/dev/null" || { echo "trixie_root: installing in $root failed" >&2; exit 1; }
echo "$packages" > "$root/.fmha-packages"
