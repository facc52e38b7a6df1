#!/bin/sh
# The .deb installed for real by apt on a podman host, and podman then running a container on a
# CNI network through the .deb's plugins. Run as `unshare --mount --pid --net --fork` so that
# all of it happens on an overlay of this machine's root, in a network namespace of its own, and
# vanishes with the namespaces: nothing is installed on the machine itself.
# Usage: deb_under_podman.sh SCRATCH DEB
set -eu
scratch=$1
deb=$2
say() { echo "deb-under-podman: $*" >&2; }

mount --make-rprivate /
# The overlay's upper layer on a tmpfs: a directory of the root's own filesystem would overlap
# the lower layer.
mount -t tmpfs -o size=2g tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root"
r=$scratch/root
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
# A /run without systemd in it, so the maintainer scripts start nothing.
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
cp "$deb" "$r/tmp/multus-rs.deb"
in_root() { chroot "$r" "$@"; }
status() { in_root dpkg-query -W -f '${Status}' "$1" 2>/dev/null || true; }

for name in podman containernetworking-plugins; do
  [ "$(status "$name")" = "install ok installed" ] || { say "$name is not installed here"; exit 1; }
done
installed() { in_root dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }' | sort; }
installed >"$scratch/before"
say "apt-get install ./multus-rs.deb"
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  -o Dpkg::Use-Pty=0 /tmp/multus-rs.deb >&2
installed >"$scratch/after"
# The reference plugins go, the .deb comes, and nothing else changes: podman stays.
changes=$(comm -3 "$scratch/before" "$scratch/after" | tr -d '\t' | paste -sd ' ')
[ "$changes" = "containernetworking-plugins multus-rs" ] ||
  { say "apt changed these packages: $changes"; exit 1; }
in_root apt-get check >&2 || { say "apt finds broken dependencies after the install"; exit 1; }

# podman looks for plugins in these directories, in this order: /usr/lib/cni must be the first
# to hold them, and hold ours.
for dir in /usr/local/libexec/cni /usr/libexec/cni /usr/local/lib/cni; do
  [ ! -e "$r$dir/bridge" ] || { say "$dir/bridge comes before /usr/lib/cni"; exit 1; }
done
for plugin in bridge host-local portmap firewall tuning; do
  [ "$(readlink "$r/usr/lib/cni/$plugin")" = cni-plugins ] ||
    { say "/usr/lib/cni/$plugin is not the .deb's"; exit 1; }
done

# podman's CNI backend, as Debian's podman runs it, with this machine's settings (runc; no
# CAP_SYS_RESOURCE for its default ulimits) and storage kept in the scratch /tmp.
cat >"$r/tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[network]
network_backend = "cni"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
cat >"$r/tmp/storage.conf" <<'EOF'
[storage]
driver = "vfs"
graphroot = "/tmp/storage"
runroot = "/run/podman-storage"
EOF
podman() {
  in_root env CONTAINERS_CONF=/tmp/containers.conf CONTAINERS_STORAGE_CONF=/tmp/storage.conf \
    podman "$@"
}
ip link set lo up
mkdir -p "$r/tmp/rootfs/bin"
cp /bin/busybox "$r/tmp/rootfs/bin/"
for dir in etc proc sys dev tmp; do mkdir -p "$r/tmp/rootfs/$dir"; done
for applet in sh ip ping; do ln -s busybox "$r/tmp/rootfs/bin/$applet"; done
tar -C "$r/tmp/rootfs" -c . | podman import --change 'CMD ["/bin/sh"]' - localhost/busybox:deb >/dev/null
# A network of podman's own making: bridge, portmap, firewall and tuning, all from the .deb.
podman network create --subnet 10.89.7.0/24 debnet >/dev/null
say "podman run on debnet"
podman run --rm --network debnet localhost/busybox:deb \
  sh -c 'ip -4 addr show eth0 && ping -c 1 -W 2 10.89.7.1'
# host-local reserved the address there at ADD, and the container's DEL freed it again.
store=$r/var/lib/cni/networks/debnet
[ "$(cat "$store/last_reserved_ip.0" 2>/dev/null)" = 10.89.7.2 ] ||
  { say "host-local did not reserve 10.89.7.2 in $store"; exit 1; }
[ ! -e "$store/10.89.7.2" ] || { say "10.89.7.2 is still taken after the container's DEL"; exit 1; }
