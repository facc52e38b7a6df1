#!/usr/bin/env bash
# The project's one test command: formatting, lints, and every test suite.
# Tests create network namespaces and run plugins in them, so this runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh runs as root: the tests create network namespaces" >&2
  exit 1
fi
# Each step's time, for CI's budget, and the free disk after it, so that a run that fills its
# disk says so: "test.sh: STEP took N s, SIZE left on disk".
timed() {
  local name=$1 started=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "test.sh: $name took $((SECONDS - started)) s, $(df -h --output=avail . | tail -1 | tr -d ' ') left on disk"
  return "$rc"
}

timed deps scripts/deps.sh
# A fresh clone gains nothing from incremental state, which would take gigabytes of its disk.
export CARGO_INCREMENTAL=0

# The parts of the e2e suite's node, built from their Go modules (scripts/peers.sh, at the lowest
# CPU priority) while the crates' suites run: on a machine that has never built them, that is
# ten minutes the run would otherwise wait. The e2e step waits for them.
node_peers_log=$(mktemp)
# A process group of their own, so that a run that stops early stops them too.
setsid scripts/peers.sh build kubernetes etcd containerd cri-o >"$node_peers_log" 2>&1 &
node_peers=$!
log=$(mktemp)
beside=
beside_dir=
trap 'rm -rf "$log" "$node_peers_log" ${beside_dir:+"$beside_dir"}
  for group in $node_peers $beside; do kill -- "-$group" 2>/dev/null || true; done' EXIT
# Stopped from outside, it cleans up too: the EXIT trap runs on exit, not on a signal's death.
trap 'exit 143' TERM INT

cargo fmt --all -- --check
timed clippy cargo clippy --workspace --all-targets -- -D warnings
status=0
timed tests bash -o pipefail -c 'cargo test --workspace --exclude e2e --no-fail-fast 2>&1 | tee "$1"' - "$log" || status=$?
# The amd64 image, built with podman from deploy/Containerfile and run as the DaemonSet runs it,
# installing into a scratch node tree: e2e installs it. The index of both architectures, which
# the packages name by digest, is built beside e2e (below), after the aarch64 build.
timed image cargo xtask image amd64 || status=$?
if ! timed node-peers wait "$node_peers"; then
  cat "$node_peers_log"
  status=1
fi
node_peers=
# The e2e suite spends most of its time waiting on the node (about three quarters of two cores
# idle), so the suites that keep the CPU busy run beside it, one after another, each with its
# own log, shown once e2e is done:
# - vm-test: the tests' VLAN, ipvlan and 8021q parts, which this kernel cannot run, under a
#   Debian kernel in qemu; it prints its own result per test binary;
# - vm-test-aarch64: the same parts cross-built, in an arm64 guest under Debian's arm64 kernel,
#   but for the side-by-side cases (4 minutes more; `cargo xtask vm-test aarch64` runs them);
# - aarch64-test: the aarch64 binaries under the plugins' and multus's suites, run by qemu-user.
#   Not beside compiles: at a low priority there, a DHCP renewal test starved past its timings;
# - image-index: the amd64 and arm64 images as one index, built twice to the same digests, the
#   arm64 one run under qemu-user;
# - package: the RPMs and the .debs of both architectures, built, listed, installed into
#   scratch roots and checked there, upgraded, built again to the same bytes, and the .deb
#   installed by apt on a podman host.
# e2e's binary is built first, so that neither waits on the other's cargo lock for long.
cargo test -p e2e --no-run
beside_dir=$(mktemp -d)
export -f timed
setsid bash -c '
  status=0
  step() { timed "$1" cargo xtask "${@:2}" >"$dir/$1" 2>&1 || status=$?; }
  dir=$1
  step vm-test vm-test
  step vm-test-aarch64 vm-test aarch64 netlink,plugins,link_plugins
  step aarch64-test aarch64-test
  step image-index image index
  step package package
  exit "$status"' - "$beside_dir" &
beside=$!
# End to end on a real node (scripts/cluster.sh): kube-apiserver, etcd, containerd 2 and a
# kubelet, multus-rs installed from deploy/ with the image just built. The node is taken down
# after, whatever the result.
export MULTUS_RS_CLUSTER_IMAGE=$PWD/target/x86_64-unknown-linux-gnu/release/multus-rs-image.tar
timed e2e bash -o pipefail -c 'cargo test -p e2e --no-fail-fast -- --test-threads=1 2>&1 | tee -a "$1"' - "$log" || status=$?
scripts/cluster.sh down || status=$?
wait "$beside" || status=$?
beside=
for step in vm-test vm-test-aarch64 aarch64-test image-index package; do
  cat "$beside_dir/$step"
done
cat "$beside_dir/aarch64-test" >>"$log"
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
