#!/usr/bin/env bash
# The static release build of the node binaries, cni-plugins and multus; prints the path of
# cni-plugins, with multus beside it. The one place this build is spelled: `cargo xtask` calls
# it too, so the demo need not compile xtask first. CARGO_TARGET_DIR is honoured.
#   scripts/build.sh [x86_64|aarch64]   (default x86_64)
# aarch64 is a cross build: Debian's gcc-aarch64-linux-gnu (scripts/deps.sh) compiles ring's C
# and links, through the toolchain's own lld as on x86_64 (.cargo/config.toml names the linker).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-x86_64}
case $arch in
  x86_64) lld=() ;;
  # rustc links x86_64 with its bundled lld by itself; for aarch64 gcc is told to use it.
  aarch64) lld=(-C link-arg=-fuse-ld=lld -C "link-arg=-B$(rustc --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld") ;;
  *) echo "scripts/build.sh: no architecture $arch (x86_64 or aarch64)" >&2; exit 2 ;;
esac
target=$arch-unknown-linux-gnu
# The target is named so that RUSTFLAGS reach the binaries and not the build's proc-macros.
# Static linking keeps a plugin call's memory at about 2.2 MB: a dynamic process also maps
# (and counts) ld.so and the whole of libc.so. Packed relative relocations (RELR) shrink the
# relocation table every start reads: 420 KB of multus's binary, and as much of each call's
# memory. Identical code folding (rust-lld's --icf=all) keeps one copy of the functions each
# crate instantiates alike (a generic over the same types, in two crates): 74 KB of multus;
# Rust promises no two functions distinct addresses, so nothing may rely on them. sha2's
# compact software SHA-512: masquerade chain names hash a few bytes a call. The checkout's and
# cargo's home paths, which panic messages carry, are written as /build and /cargo: a build
# from another directory, or with another CARGO_HOME, makes the same bytes.
remap="--remap-path-prefix=$PWD=/build --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
# The crates' sources, from cargo's registry or from the source RPM's vendor/, are written as
# /crates: built from either, the binaries are the same. Of two prefixes that match, the later
# one wins.
for src in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ "$PWD/vendor/"; do
  if [ -d "$src" ]; then remap+=" --remap-path-prefix=${src%/}=/crates"; fi
done
RUSTFLAGS="-C target-feature=+crt-static ${lld[*]} -C link-arg=-Wl,-z,pack-relative-relocs -C link-arg=-Wl,--icf=all --cfg sha2_backend=\"soft\" --cfg sha2_backend_soft=\"compact\" $remap" \
  "${CARGO:-cargo}" build --release -q -p plugins -p multus-node --target "$target"
echo "${CARGO_TARGET_DIR:-$PWD/target}/$target/release/cni-plugins"
