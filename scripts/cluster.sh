#!/usr/bin/env bash
# A real single-node Kubernetes for the tests and for trying things: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, a container runtime (containerd 2, Debian's
# containerd 1.6, or CRI-O) and a kubelet, built from their modules by scripts/peers.sh, with
# multus-rs installed from deploy/.
#
#   scripts/cluster.sh up [thin|thick|thin-per-node-certificate|thick-per-node-certificate|
#                          microshift|whereabouts|bare] [--containerd 1|2 | --cri-o]
#                          [--own-conf-dir]
#                                        bare: the cluster network alone, no multus (a baseline,
#                                        or a node to install another build on by hand);
#                                        *-per-node-certificate: multus talks to the API server
#                                        with per-node certificates (deploy/per-node-certificate),
#                                        which the controller manager signs for 1 minute;
#                                        --own-conf-dir: the runtime reads /run/multus/cni/net.d
#                                        alone, and multus is installed from deploy/own-conf-dir
#                                        (thin and thick)
#   scripts/cluster.sh exec -- CMD...    CMD as on the node: its network and mount namespaces,
#                                        with kubectl on PATH and the admin's KUBECONFIG
#   scripts/cluster.sh stop|start PART   for the tests: apiserver, etcd, kubelet, or the runtime
#                                        (containerd or cri-o, whichever runs)
#                                        stopped by its PID, or started as `up` starts it
#   scripts/cluster.sh reboot [--without-multus-config]
#                                        for the tests: the node's runtime side loses power and
#                                        boots again (the control plane runs on); with the flag,
#                                        it boots without multus's config (as after upstream's
#                                        thick daemon removed it at shutdown), the cluster
#                                        network's in place
#   scripts/cluster.sh down              stops everything and removes what `up` made
#
# The node is a network namespace and a mount namespace of its own. Nothing changes in the
# machine's root network namespace: the node's address (10.0.0.1) is on the node's loopback,
# the cluster network is a bridge inside the node, and the node's /run, /var/log, /etc/cni,
# /opt/cni, /var/lib/{kubelet,cni,containerd,multus} and /etc/kubernetes are its own (CRI-O keeps
# its images and containers under the node's state). The kubelet's
# cgroups live under /multus-rs-cluster in every hierarchy.
#
# `up` prints, as its last two lines, the exports that point kubectl at the cluster.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state=${MULTUS_RS_CLUSTER_STATE:-/var/lib/multus-rs-cluster}
run=/run/multus-rs-cluster
netns=multus-rs-node
node=multus-rs-node
node_ip=10.0.0.1
cgroup=multus-rs-cluster
service_cidr=10.43.0.0/16
# The machine's loopback port that leads to the node's API server.
port=${MULTUS_RS_CLUSTER_PORT:-16443}
pod_cidr=10.42.0.0/16

log() { echo "cluster: $*" >&2; }
die() {
  echo "cluster: $*" >&2
  # A node that failed to start says why: the ends of its parts' logs, which the next `up`
  # removes when it takes the half-started node down.
  if [ -n "${starting:-}" ]; then
    log_ends "$state"/logs/*.log
  fi
  exit 1
}
log_ends() { # log files...
  local f
  for f; do
    [ -s "$f" ] || continue
    echo "cluster: the end of $f:" >&2
    tail -n 15 "$f" | sed 's/^/    /' >&2
  done
}

# CMD in the node's namespaces.
on_node() { nsenter --net="/run/netns/$netns" --mount="$run/mnt" -- "$@"; }

is_up() { [ -e "/run/netns/$netns" ] && [ -e "$run/mnt" ] && mountpoint -q "$run/mnt"; }
# A start that got through to its end; without this mark the node is half-started.
started_mark() { echo "$state/started"; }
# The parts of a running node whose process is gone (a crash, or a test's `stop` it did not
# undo).
dead_parts() {
  local name pid
  for name in etcd apiserver controller-manager scheduler "$(runtime_part)" kubelet kube-proxy; do
    pid=$(cat "$state/pids/$name" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || echo "$name"
  done
}

# ---------------------------------------------------------------------------------------------
# The parts

peer_dirs() {
  local p
  for p in kubernetes etcd; do
    "$root/scripts/peers.sh" build "$p" >/dev/null
  done
  kube=$("$root/scripts/peers.sh" dir kubernetes)
  etcd_dir=$("$root/scripts/peers.sh" dir etcd)
  # crictl is pinned beside containerd 2, and talks to every runtime.
  "$root/scripts/peers.sh" build containerd >/dev/null
  crictl=$("$root/scripts/peers.sh" dir containerd)/crictl
  case $runtime in
    containerd-2) containerd_dir=$("$root/scripts/peers.sh" dir containerd) ;;
    containerd-1) debian_containerd ;;
    cri-o)
      "$root/scripts/peers.sh" build cri-o >/dev/null
      crio_dir=$("$root/scripts/peers.sh" dir cri-o)
      ;;
  esac
}

# The runtime's CRI socket, and its name as a part of the node (its PID file's).
runtime_socket() { [ "$runtime" = cri-o ] && echo /run/crio/crio.sock || echo /run/containerd/containerd.sock; }
runtime_part() { [ "$runtime" = cri-o ] && echo cri-o || echo containerd; }

# containerd 1.x is Debian's package.
debian_containerd() {
  if ! dpkg-query -W -f='${Status}' containerd 2>/dev/null | grep -q "install ok installed"; then
    log "installing Debian's containerd"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containerd >/dev/null
  fi
  containerd_dir=$state/containerd1
  mkdir -p "$containerd_dir"
  ln -sf /usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr "$containerd_dir/"
}

# The image of this checkout, as `cargo xtask image amd64` leaves it beside the release binaries;
# MULTUS_RS_CLUSTER_IMAGE names an archive already made (the test command makes it once).
release=$root/target/x86_64-unknown-linux-gnu/release
multus_image() {
  if [ -n "${MULTUS_RS_CLUSTER_IMAGE:-}" ]; then
    [ -f "$MULTUS_RS_CLUSTER_IMAGE" ] || die "MULTUS_RS_CLUSTER_IMAGE: no file $MULTUS_RS_CLUSTER_IMAGE"
    multus_archive=$(realpath "$MULTUS_RS_CLUSTER_IMAGE")
  else
    log "building the multus-rs image (cargo xtask image amd64)"
    (cd "$root" && cargo xtask image amd64 >&2)
    multus_archive=$release/multus-rs-image.tar
  fi
}

# podman with its storage in the node's state: nothing stays on the machine.
podman_scratch() {
  local p=$state/podman
  mkdir -p "$p"
  printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/storage"\nrunroot = "%s/run"\n' "$p" "$p" >"$p/storage.conf"
  CONTAINERS_STORAGE_CONF=$p/storage.conf podman "$@"
}

# podman's archive of IMAGE at FILE, written beside it and renamed: podman never overwrites one.
save_image() { # image file
  local tmp
  tmp=$(mktemp -d "$(dirname "$2")/.save.XXXXXX")
  podman_scratch save --quiet --format docker-archive -o "$tmp/image.tar" "$1"
  mv -f "$tmp/image.tar" "$2"
  rmdir "$tmp"
}

# The pause image and the test image, made here from Debian's busybox-static and a pause of our
# own: no registry can be reached.
local_images() {
  local ctx=$state/images r=$state/images/test/rootfs a
  mkdir -p "$ctx/pause" "$r/bin" "$r/etc" "$r/tmp" "$r/www"
  gcc -static -Os -o "$ctx/pause/pause" "$root/test-support/cluster/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$ctx/pause/Containerfile"
  podman_scratch build --quiet --network=none -t localhost/pause:3.10 "$ctx/pause" >/dev/null
  save_image localhost/pause:3.10 "$ctx/pause.tar"
  cp /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do
    [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$r/etc/passwd"
  echo 'root:x:0:' >"$r/etc/group"
  printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\nCMD ["sh"]\n' >"$ctx/test/Containerfile"
  podman_scratch build --quiet --network=none -t localhost/multus-rs-test:latest "$ctx/test" >/dev/null
  save_image localhost/multus-rs-test:latest "$ctx/test.tar"
}

# podman on CRI-O's own storage, on the node (its run root is under the node's /run).
podman_crio() {
  on_node podman --root "$state/crio-root" --runroot /run/containers/storage --storage-driver vfs "$@"
}

image_digest() {
  if [ "$runtime" = cri-o ]; then
    podman_crio image inspect --format '{{.Digest}}' localhost/multus-rs:latest 2>/dev/null || true
  else
    on_node "$containerd_dir/ctr" -n k8s.io images ls "name==localhost/multus-rs:latest" 2>/dev/null |
      awk 'NR == 2 { print $3 }' || true
  fi
}

import_images() {
  local tar said
  for tar in "$state/images/pause.tar" "$state/images/test.tar" "$multus_archive"; do
    if [ "$runtime" = cri-o ]; then
      said=$(podman_crio load --quiet --input "$tar" 2>&1) || die "importing $tar: $said"
    else
      said=$(on_node "$containerd_dir/ctr" -n k8s.io images import "$tar" 2>&1) || die "importing $tar: $said"
    fi
  done
}

# ---------------------------------------------------------------------------------------------
# Certificates: one CA, a serving certificate for the API server, a client certificate per
# component, and the service-account signing key.

pki() {
  local p=$state/pki
  [ -f "$p/done" ] && return
  mkdir -p "$p"
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
  key "$p/ca.key"
  openssl req -x509 -new -key "$p/ca.key" -subj /CN=multus-rs-cluster-ca -days 3650 -out "$p/ca.crt"
  cert() { # name subject [sans]
    key "$p/$1.key"
    openssl req -new -key "$p/$1.key" -subj "$2" -out "$p/$1.csr"
    local ext=$p/$1.ext
    echo "basicConstraints=CA:FALSE" >"$ext"
    echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
    if [ -n "${3:-}" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
      echo "subjectAltName=$3" >>"$ext"
    else
      echo "extendedKeyUsage=clientAuth" >>"$ext"
    fi
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
      -days 3650 -extfile "$ext" -out "$p/$1.crt" 2>/dev/null
  }
  cert apiserver /CN=kube-apiserver \
    "IP:$node_ip,IP:10.43.0.1,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=admin"
  cert apiserver-kubelet "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert kubelet "/O=system:nodes/CN=system:node:$node"
  cert kubelet-serving "/CN=$node" "IP:$node_ip,DNS:$node"
  cert controller-manager /CN=system:kube-controller-manager
  cert scheduler /CN=system:kube-scheduler
  cert kube-proxy /CN=system:kube-proxy
  key "$p/sa.key"
  openssl pkey -in "$p/sa.key" -pubout -out "$p/sa.pub"
  for c in admin kubelet controller-manager scheduler kube-proxy; do
    kubeconfig "$c" "https://$node_ip:6443" >"$state/$c.kubeconfig"
  done
  # The machine's own kubectl reaches the API server through the forwarder on its loopback.
  kubeconfig admin "https://127.0.0.1:$port" >"$state/kubeconfig"
  touch "$p/done"
}

# A component's kubeconfig, naming the files of $state/pki; with `inline`, holding them, as the
# kubelet's /etc/kubernetes/kubelet.conf on the node does (per-node certificates are asked for
# with it, from inside pods that do not see $state).
kubeconfig() { # component server [inline]
  local p=$state/pki ca cert key
  if [ "${3:-}" = inline ]; then
    ca="certificate-authority-data: $(base64 -w0 "$p/ca.crt")"
    cert="client-certificate-data: $(base64 -w0 "$p/$1.crt")"
    key="client-key-data: $(base64 -w0 "$p/$1.key")"
  else
    ca="certificate-authority: $p/ca.crt"
    cert="client-certificate: $p/$1.crt"
    key="client-key: $p/$1.key"
  fi
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: multus-rs-cluster
    cluster:
      server: $2
      $ca
users:
  - name: $1
    user:
      $cert
      $key
contexts:
  - name: $1
    context: {cluster: multus-rs-cluster, user: $1}
current-context: $1
EOF
}

# ---------------------------------------------------------------------------------------------
# The node's namespaces

namespaces() {
  mkdir -p "$run" "$state/node"
  if ! mountpoint -q "$run"; then
    mount --bind "$run" "$run"
    mount --make-private "$run"
  fi
  ip netns add "$netns"
  ip -n "$netns" link set lo up
  ip -n "$netns" addr add "$node_ip/32" dev lo
  # The node has no uplink; service addresses need a route before kube-proxy's DNAT applies.
  ip -n "$netns" route add "$service_cidr" dev lo
  touch "$run/mnt"
  unshare --mount="$run/mnt" --propagation private true
  local n=$state/node d
  for d in run var/log etc/cni etc/kubernetes opt/cni var/lib/kubelet var/lib/cni var/lib/containerd var/lib/multus; do
    mkdir -p "$n/$d"
  done
  # The node's own directories over the machine's, then shared inside the node, as on a host
  # where the kubelet propagates mounts into pods.
  on_node sh -euc "
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /run/netns /run/cni
    for d in var/log etc/cni etc/kubernetes opt/cni var/lib/kubelet var/lib/cni var/lib/containerd var/lib/multus; do
      mkdir -p /\$d
      mount --bind '$n'/\$d /\$d
    done
    mount --make-rshared /
  "
  mkdir -p "$n/etc/cni/net.d" "$n/opt/cni/bin" "$n/var/log/multus"
}

cgroups_make() {
  local c
  for c in /sys/fs/cgroup/*/; do
    if [ "$(basename "$c")" != unified ]; then
      mkdir -p "$c$cgroup"
    fi
  done
  # A v1 cpuset group takes no process until it has CPUs and memory nodes.
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$cgroup/cpuset.mems"
  fi
}

# ---------------------------------------------------------------------------------------------
# The daemons

# CMD in a session of its own (a Ctrl-C in the shell that ran `up` does not reach it),
# detached, its PID in PIDFILE: the PID of CMD itself, which `stop` signals.
spawn() { # pidfile logfile cmd...
  local pidfile=$1 logfile=$2 i
  shift 2
  rm -f "$pidfile"
  setsid -f sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
    >>"$logfile" 2>&1 </dev/null
  for ((i = 0; i < 100; i++)); do
    [ -s "$pidfile" ] && return 0
    sleep 0.05
  done
  die "$* did not start"
}

start() { # name command...
  local name=$1
  shift
  mkdir -p "$state/logs" "$state/pids"
  spawn "$state/pids/$name" "$state/logs/$name.log" nsenter --net="/run/netns/$netns" --mount="$run/mnt" -- "$@"
}

stop() { # name
  local f=$state/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# Until COMMAND succeeds, for SECONDS of the clock (a probe may itself take seconds). WHAT, when
# it names a part `start` started, fails at once if that part exits.
wait_for() { # what seconds command...
  local what=$1 secs=$2 pid
  local deadline=$((SECONDS + secs))
  shift 2
  pid=$(cat "$state/pids/$what" 2>/dev/null || true)
  until "$@" >/dev/null 2>&1; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      die "$what exited at its start; logs in $state/logs"
    fi
    [ "$SECONDS" -lt "$deadline" ] || die "$what did not come up in ${secs}s; logs in $state/logs"
    sleep 0.2
  done
}

# kubectl on the node, where the API server is.
kc() { on_node "$kube/kubectl" --kubeconfig "$state/admin.kubeconfig" "$@"; }

start_etcd() {
  start etcd "$etcd_dir/etcd" --data-dir "$state/etcd" --name "$node" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$node=http://127.0.0.1:2380" --log-level warn
  wait_for etcd 30 on_node "$etcd_dir/etcdctl" --endpoints http://127.0.0.1:2379 endpoint health
}

start_apiserver() {
  local p=$state/pki
  cat >"$state/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    omitStages: [RequestReceived]
EOF
  start apiserver "$kube/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
    --advertise-address "$node_ip" --bind-address 0.0.0.0 --secure-port 6443 \
    --service-cluster-ip-range "$service_cidr" \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet.crt" --kubelet-client-key "$p/apiserver-kubelet.key" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$state/audit-policy.yaml" --audit-log-path "$state/logs/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1
  wait_for apiserver 60 kc get --raw /readyz
}

start_forwarder() {
  # The one thing of the node's on the machine's side: a loopback listener whose every
  # connection is relayed from inside the node's network namespace. It listens in the network
  # namespace `up` first ran in.
  mkdir -p "$state/pids"
  spawn "$state/pids/forward" "$state/logs/forward.log" \
    socat "TCP-LISTEN:$port,bind=127.0.0.1,reuseaddr,fork" \
    SYSTEM:"exec nsenter --net=/run/netns/$netns socat STDIO TCP\:$node_ip\:6443"
  local i
  for ((i = 0; i < 50; i++)); do
    "$kube/kubectl" --kubeconfig "$state/kubeconfig" get --raw /readyz >/dev/null 2>&1 && return
    sleep 0.2
  done
  # As in a test binary's throwaway network namespace, whose loopback is down.
  stop forward
  log "no loopback here to forward 127.0.0.1:$port from; kubectl works on the node: scripts/cluster.sh exec -- kubectl"
}

start_controllers() {
  local p=$state/pki
  start controller-manager "$kube/kube-controller-manager" \
    --kubeconfig "$state/controller-manager.kubeconfig" --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials --cluster-cidr "$pod_cidr" --allocate-node-cidrs=false \
    --controllers '*,-nodeipam' --profiling=false \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --cluster-signing-duration 1m
  start scheduler "$kube/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" \
    --leader-elect=false --profiling=false
  wait_for "the controller manager" 60 on_node curl -fsk https://127.0.0.1:10257/healthz
  wait_for "the scheduler" 60 on_node curl -fsk https://127.0.0.1:10259/healthz
}

# Services, the kubernetes one among them, which multus's kubeconfig names.
start_kube_proxy() {
  start kube-proxy "$kube/kube-proxy" --kubeconfig "$state/kube-proxy.kubeconfig" \
    --hostname-override "$node" --cluster-cidr "$pod_cidr" --proxy-mode iptables \
    --conntrack-max-per-core 0 --profiling=false
  wait_for "kube-proxy" 60 on_node curl -fs http://127.0.0.1:10256/healthz
}

# The directory the runtime reads its network config from: the node's, or multus's own.
runtime_conf_dir() { cat "$state/conf-dir" 2>/dev/null || echo /etc/cni/net.d; }

# Without CAP_SYS_RESOURCE (as in some sandboxes) no process may lower its OOM score, and the
# kubelet asks -998 for every sandbox: the runtime must leave scores alone. (CAP_SYS_RESOURCE is
# bit 24 of the capability sets.)
oom_scores_fixed() { ((((0x$(awk '/^CapEff/ { print $2 }' /proc/self/status) >> 24) & 1) == 0)); }

containerd_config() {
  local bin_dirs="'/opt/cni/bin', '/run/cni/bin'" restrict_oom=false
  if oom_scores_fixed; then
    restrict_oom=true
  fi
  if [ "$runtime" = containerd-2 ]; then
    cat <<EOF
version = 3
root = '$state/containerd-root'
state = '/run/containerd'
[grpc]
  address = '/run/containerd/containerd.sock'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = 'localhost/pause:3.10'
# Restricted, containerd keeps scores at its own or above.
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = $restrict_oom
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [$bin_dirs]
  conf_dir = '$(runtime_conf_dir)'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = false
EOF
  else
    cat <<EOF
version = 2
root = '$state/containerd-root'
state = '/run/containerd'
[grpc]
  address = '/run/containerd/containerd.sock'
[plugins.'io.containerd.grpc.v1.cri']
  sandbox_image = 'localhost/pause:3.10'
  restrict_oom_score_adj = $restrict_oom
[plugins.'io.containerd.grpc.v1.cri'.cni]
  bin_dir = '/opt/cni/bin'
  conf_dir = '$(runtime_conf_dir)'
[plugins.'io.containerd.grpc.v1.cri'.containerd]
  default_runtime_name = 'runc'
[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc.options]
  SystemdCgroup = false
EOF
  fi
}

start_containerd() {
  containerd_config >"$state/containerd.toml"
  start containerd env PATH="$containerd_dir:/usr/sbin:/usr/bin:/sbin:/bin" \
    "$containerd_dir/containerd" --config "$state/containerd.toml"
  wait_for containerd 30 on_node "$containerd_dir/ctr" version
}

# CRI-O as a distribution runs it (runc under conmon, namespaces pinned by pinns), with cgroupfs
# as the kubelet has it, vfs storage under the node's state, and the same network config
# directory and plugin directories as containerd 2. RUNC is the runc it calls.
crio_config() { # runc
  cat <<EOF
[crio]
root = '$state/crio-root'
runroot = '/run/containers/storage'
storage_driver = 'vfs'
version_file = '/run/crio/version'
clean_shutdown_file = '$state/crio-root/clean.shutdown'
[crio.api]
listen = '/run/crio/crio.sock'
[crio.runtime]
default_runtime = 'runc'
cgroup_manager = 'cgroupfs'
pinns_path = '$crio_dir/pinns'
[crio.runtime.runtimes.runc]
runtime_path = '$1'
runtime_root = '/run/runc'
monitor_path = '/usr/bin/conmon'
monitor_cgroup = 'pod'
[crio.image]
pause_image = 'localhost/pause:3.10'
[crio.network]
network_dir = '$(runtime_conf_dir)'
plugin_dirs = ['/opt/cni/bin', '/run/cni/bin']
EOF
}

# CRI-O has no setting to keep to the capabilities it has (a privileged container asks for
# all) or to leave OOM scores alone, and asks for hugetlb limits whenever the kernel has the
# controller, mounted or not: runc is called through this, which drops from each bundle and
# exec'd process what this machine cannot apply (no-sys-resource: CAP_SYS_RESOURCE and the OOM
# score; no-hugetlb: the hugetlb limits).
runc_for_this_machine() { # what...
  cat <<EOF
#!/bin/sh
prev=
for a in "\$@"; do
  case \$prev in
    --bundle) f=\$a/config.json ;;
    --process) f=\$a ;;
    *) f= ;;
  esac
  if [ -n "\$f" ]; then
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
process = c.get("process", c)
if "no-sys-resource" in sys.argv[2:]:
    process.pop("oomScoreAdj", None)
    for caps in process.get("capabilities", {}).values():
        if "CAP_SYS_RESOURCE" in caps:
            caps.remove("CAP_SYS_RESOURCE")
if "no-hugetlb" in sys.argv[2:]:
    c.get("linux", {}).get("resources", {}).pop("hugepageLimits", None)
json.dump(c, open(sys.argv[1], "w"))' "\$f" $* || exit 1
  fi
  prev=\$a
done
exec /usr/sbin/runc "\$@"
EOF
}

start_cri_o() {
  local drop=() runc=/usr/sbin/runc
  if oom_scores_fixed; then
    drop+=(no-sys-resource)
  fi
  if [ ! -e /sys/fs/cgroup/cgroup.controllers ] && [ ! -d /sys/fs/cgroup/hugetlb ]; then
    drop+=(no-hugetlb)
  fi
  if [ ${#drop[@]} -gt 0 ]; then
    runc=$state/runc-for-this-machine
    runc_for_this_machine "${drop[@]}" >"$runc"
    chmod 755 "$runc"
  fi
  crio_config "$runc" >"$state/crio.conf"
  start cri-o "$crio_dir/crio" --config "$state/crio.conf"
  wait_for cri-o 30 on_node "$crictl" -r "unix://$(runtime_socket)" version
}

start_runtime() { "start_$(runtime_part | tr - _)"; }

start_kubelet() {
  local p=$state/pki
  : >"$state/resolv.conf"
  cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$(runtime_socket)
tlsCertFile: $p/kubelet-serving.crt
tlsPrivateKeyFile: $p/kubelet-serving.key
resolvConf: $state/resolv.conf
clusterDomain: cluster.local
staticPodPath: /etc/kubernetes/manifests
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
localStorageCapacityIsolation: false
EOF
  mkdir -p "$state/node/etc/kubernetes/manifests"
  kubeconfig kubelet "https://$node_ip:6443" inline >"$state/node/etc/kubernetes/.kubelet.conf"
  mv "$state/node/etc/kubernetes/.kubelet.conf" "$state/node/etc/kubernetes/kubelet.conf"
  start kubelet "$kube/kubelet" --config "$state/kubelet.yaml" \
    --kubeconfig "$state/kubelet.kubeconfig" --hostname-override "$node" --node-ip "$node_ip"
  wait_for "the node object" 60 kc get node "$node"
}

# ---------------------------------------------------------------------------------------------
# The cluster network: bridge and host-local from our cni-plugins, as ovn-kubernetes is on
# MicroShift. Its file name and bin directory follow the mode's deploy tree.

# The cluster network's plugins, in /opt/cni/bin and, as on MicroShift, in /run/cni/bin.
cluster_plugins() {
  local n=$state/node name
  cp "$release/cni-plugins" "$n/opt/cni/bin/cni-plugins.tmp"
  mv "$n/opt/cni/bin/cni-plugins.tmp" "$n/opt/cni/bin/cni-plugins"
  for name in bridge host-local loopback portmap; do
    ln -sf cni-plugins "$n/opt/cni/bin/$name"
  done
  if [ "$mode" = microshift ]; then
    on_node sh -c 'mkdir -p /run/cni/bin && cp /opt/cni/bin/cni-plugins /run/cni/bin/ &&
      for n in bridge host-local loopback portmap; do ln -sf cni-plugins /run/cni/bin/$n; done'
  fi
}

cluster_network() {
  local n=$state/node file=10-cluster.conflist bridge
  cluster_plugins
  rm -f "$n"/etc/cni/net.d/10-cluster.conflist "$n"/etc/cni/net.d/10-ovn-kubernetes.conf
  bridge='"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.42.0.0/24", "gateway": "10.42.0.1"}]],
             "routes": [{"dst": "0.0.0.0/0"}]}'
  if [ "$mode" = microshift ]; then
    # MicroShift's cluster network is one file.
    file=10-ovn-kubernetes.conf
    echo "{\"cniVersion\": \"1.0.0\", \"name\": \"ovn-kubernetes\", $bridge}" >"$n/etc/cni/net.d/.$file"
  else
    echo "{\"cniVersion\": \"1.0.0\", \"name\": \"cluster\", \"plugins\": [{$bridge},
    {\"type\": \"portmap\", \"capabilities\": {\"portMappings\": true}}]}" >"$n/etc/cni/net.d/.$file"
  fi
  mv "$n/etc/cni/net.d/.$file" "$n/etc/cni/net.d/$file"
}

# ---------------------------------------------------------------------------------------------
# multus-rs from deploy/

tree_of() {
  local in=
  [ "$(runtime_conf_dir)" = /etc/cni/net.d ] || in=own-conf-dir/
  case $1 in
    thin) echo "${in}base" ;;
    thick) echo "$in$1" ;;
    thin-per-node-certificate) echo per-node-certificate/base ;;
    thick-per-node-certificate) echo per-node-certificate/thick ;;
    microshift | whereabouts) echo "$1" ;;
    *) die "unknown mode $1 (thin, thick, thin-per-node-certificate, thick-per-node-certificate, microshift, whereabouts)" ;;
  esac
}

namespace_of() { [ "$1" = microshift ] && echo openshift-multus || echo multus; }

install_multus() {
  if [ "$mode" = bare ]; then
    echo bare >"$state/mode"
    wait_for "the node's Ready condition" 120 node_ready
    return
  fi
  kc apply -k "$root/deploy/$(tree_of "$mode")" >&2
  echo "$mode" >"$state/mode"
  if [ -n "${restart_multus:-}" ]; then
    kc -n "$(namespace_of "$mode")" rollout restart ds/multus >&2
    kc -n "$(namespace_of "$mode")" rollout status ds/multus --timeout=180s >&2
  fi
  wait_for "multus's DaemonSet" 180 ds_available "$(namespace_of "$mode")" multus
  # A replaced install's DaemonSet pods can outlive it: the DaemonSet controller, working from
  # a cache that still held the old DaemonSet, may have made one more pod from the old template
  # into the namespace made again, which the garbage collector removes later. Until then
  # `kubectl logs ds/multus` may pick it.
  wait_for_stray_pods "$(namespace_of "$mode")"
  # Available is not installed: until 00-multus.conf is in place the runtime gives new pods the
  # cluster network alone (no readiness probe says otherwise yet).
  wait_for "00-multus.conf" 120 on_node sh -c "ls $(runtime_conf_dir)/00-multus.conf*"
  wait_for "the node's Ready condition" 120 node_ready
}

# Waits (at most 120 s) until no pod in namespace $1 belongs to a DaemonSet other than those
# there now.
wait_for_stray_pods() {
  local deadline=$((SECONDS + 120)) current owners stray said=
  while :; do
    if current=$(kc -n "$1" get ds -o jsonpath='{.items[*].metadata.uid}') &&
      owners=$(kc -n "$1" get pods -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.ownerReferences[?(@.kind=="DaemonSet")].uid}{"\n"}{end}'); then
      stray=$(awk -v current=" $current " '$2 != "" && index(current, " " $2 " ") == 0 { print $1 }' <<<"$owners")
      [ -n "$stray" ] || return 0
      [ -n "$said" ] || log "waiting for pods of a replaced DaemonSet to go: $(echo "$stray" | paste -sd ' ')"
      said=1
    fi
    [ "$SECONDS" -lt "$deadline" ] ||
      die "pods of a replaced DaemonSet still in namespace $1 after 120 s: ${stray:-(the API did not answer)}"
    sleep 0.5
  done
}

ds_available() { [ "$(kc -n "$1" get ds "$2" -o jsonpath='{.status.numberAvailable}')" = 1 ]; }
node_ready() {
  kc get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

# The previous install, unless it is this mode's: applying it again updates it in place.
uninstall_multus() {
  local previous
  previous=$(cat "$state/mode" 2>/dev/null || true)
  [ -n "$previous" ] && [ "$previous" != "$mode" ] && [ "$previous" != bare ] || return 0
  log "removing the $previous install"
  kc delete -k "$root/deploy/$(tree_of "$previous")" --ignore-not-found --wait=true --timeout=120s >&2 || true
  rm -f "$state/mode"
}

exports() {
  echo "export KUBECONFIG=$state/kubeconfig"
  echo "export PATH=$kube:\$PATH"
}

# ---------------------------------------------------------------------------------------------

up() {
  mode=thin
  runtime=containerd-2
  local conf_dir=/etc/cni/net.d
  while [ $# -gt 0 ]; do
    case $1 in
      --containerd)
        case ${2:-} in 1 | 2) runtime=containerd-$2 ;; *) die "--containerd takes 1 or 2" ;; esac
        shift 2
        ;;
      --cri-o)
        runtime=cri-o
        shift
        ;;
      --own-conf-dir)
        conf_dir=/run/multus/cni/net.d
        shift
        ;;
      thin | thick | thin-per-node-certificate | thick-per-node-certificate | microshift | whereabouts | bare)
        mode=$1
        shift
        ;;
      *) die "usage: scripts/cluster.sh up [thin|thick|thin-per-node-certificate|thick-per-node-certificate|microshift|whereabouts|bare] [--containerd 1|2 | --cri-o] [--own-conf-dir]" ;;
    esac
  done
  # containerd 1.x reads plugins from one directory; the microshift tree installs into
  # /run/cni/bin, which containerd 2 and CRI-O search beside /opt/cni/bin.
  if [ "$runtime" = containerd-1 ] && [ "$mode" = microshift ]; then
    die "microshift runs with --containerd 2 or --cri-o: containerd 1.x has a single bin_dir, /opt/cni/bin"
  fi
  case $conf_dir:$mode in
    /etc/cni/net.d:* | *:thin | *:thick) ;;
    *) die "--own-conf-dir is for thin and thick: deploy/own-conf-dir has no $mode" ;;
  esac
  [ "$(id -u)" = 0 ] || die "runs as root: the node is made of namespaces and cgroups"
  command -v socat >/dev/null || die "socat is missing (scripts/deps.sh installs it)"
  if { is_up || [ -e "/run/netns/$netns" ]; } && [ ! -e "$(started_mark)" ]; then
    log "a node is left half-started; starting again"
    down
  fi
  if is_up && [ "$(cat "$state/runtime" 2>/dev/null)" != "$runtime" ]; then
    log "$(cat "$state/runtime" 2>/dev/null) is running; starting again with $runtime"
    down
  fi
  if is_up && [ "$(runtime_conf_dir)" != "$conf_dir" ]; then
    log "the runtime reads $(runtime_conf_dir); starting again with $conf_dir"
    down
  fi
  if is_up; then
    local dead name
    dead=$(dead_parts)
    if [ -n "$dead" ]; then
      log "no longer running on the node: $(echo "$dead" | paste -sd ' '); starting again"
      for name in $dead; do
        log_ends "$state/logs/$name.log"
      done
      down
    fi
  fi
  peer_dirs
  multus_image
  local_images
  if is_up; then
    local previous
    previous=$(cat "$state/mode" 2>/dev/null || true)
    uninstall_multus
    local before
    before=$(image_digest)
    import_images
    # A new image under the same mode: the DaemonSet's pods are made again from it.
    if [ "$previous" = "$mode" ] && [ "$before" != "$(image_digest)" ]; then
      restart_multus=1
    fi
    # The cluster network stays as it is under the same mode: rewriting it would make the
    # installer rewrite 00-multus.conf, and pods made meanwhile would miss their networks.
    if [ "$previous" != "$mode" ]; then
      on_node sh -c "rm -f $conf_dir/00-multus.conf*"
      cluster_network
    fi
  else
    log "starting the node"
    starting=1
    pki
    namespaces
    echo "$runtime" >"$state/runtime"
    echo "$conf_dir" >"$state/conf-dir"
    cgroups_make
    cluster_network
    start_etcd
    start_apiserver
    start_forwarder
    start_controllers
    start_runtime
    import_images
    start_kubelet
    start_kube_proxy
    starting=
    touch "$(started_mark)"
  fi
  install_multus
  log "up: $mode, $runtime, $conf_dir, node $node"
  exports
}

# Every process of the node: in its network or mount namespace, or in its cgroups.
node_pids() {
  local net mnt p
  net=$(stat -Lc %i "/run/netns/$netns" 2>/dev/null || true)
  mnt=$(stat -Lc %i "$run/mnt" 2>/dev/null || true)
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    if { [ -n "$net" ] && [ "$(stat -Lc %i "$p/ns/net" 2>/dev/null)" = "$net" ]; } ||
      { [ -n "$mnt" ] && [ "$(stat -Lc %i "$p/ns/mnt" 2>/dev/null)" = "$mnt" ]; } ||
      grep -qs ":/$cgroup/" "$p/cgroup"; then
      echo "${p#/proc/}"
    fi
  done
}

down() {
  # runtime is the running node's here, not the one `up` was asked for.
  local name pid c runtime crictl
  if [ -e "$run/mnt" ] && [ -f "$state/runtime" ]; then
    # The pods first, through the runtime, so their networks are deleted by their plugins.
    runtime=$(cat "$state/runtime")
    # Without crictl (the peers' cache gone) the rest below still stops everything.
    if on_node test -S "$(runtime_socket)" 2>/dev/null &&
      crictl=$("$root/scripts/peers.sh" dir containerd 2>/dev/null)/crictl; then
      stop kubelet
      on_node timeout 60 "$crictl" -r "unix://$(runtime_socket)" rmp -fa >/dev/null 2>&1 || true
    fi
  fi
  for name in kubelet kube-proxy scheduler controller-manager forward apiserver containerd cri-o etcd; do
    stop "$name"
  done
  # What is left: the shims, the containers and anything exec'd in the node.
  for _ in 1 2 3; do
    pid=$(node_pids)
    [ -n "$pid" ] || break
    # shellcheck disable=SC2086 # a list of PIDs
    kill -KILL $pid 2>/dev/null || true
    sleep 0.5
  done
  [ -z "$(node_pids)" ] || die "processes still in the node: $(node_pids | tr '\n' ' ')"
  if [ -e "$run/mnt" ]; then
    umount "$run/mnt" 2>/dev/null || true
    rm -f "$run/mnt"
  fi
  if mountpoint -q "$run"; then
    umount "$run"
  fi
  rmdir "$run" 2>/dev/null || true
  if [ -e "/run/netns/$netns" ]; then
    ip netns del "$netns"
  fi
  # The cgroups, deepest first.
  for c in /sys/fs/cgroup/*/"$cgroup"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  for c in /sys/fs/cgroup/*/"$cgroup"; do
    [ -d "$c" ] && die "cgroup $c is still there"
  done
  if grep -qs " $state" /proc/self/mountinfo; then
    die "something is still mounted under $state"
  fi
  rm -rf "$state"
  log "down"
}

# For the tests: the node's runtime side goes through a power cut and boots again. The kubelet,
# runtime, the shims or monitors and every container die; /run (a tmpfs) starts empty, so the pods'
# netns and the runtime's state are gone; the links go. What is on disk stays: /etc/cni,
# /var/lib. The control plane runs on as if on another machine.
reboot_node() { # [--without-multus-config]
  local keep p pids l left
  [ -f "$state/runtime" ] || die "no node is up"
  runtime=$(cat "$state/runtime")
  mode=$(cat "$state/mode")
  peer_dirs
  stop kubelet
  stop "$(runtime_part)"
  keep=" $(cat "$state"/pids/{etcd,apiserver,controller-manager,scheduler,kube-proxy,forward} 2>/dev/null | tr '\n' ' ' || true) "
  for _ in 1 2 3; do
    pids=
    for p in $(node_pids); do
      case $keep in *" $p "*) ;; *) pids+=" $p" ;; esac
    done
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086 # a list of PIDs
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  done
  on_node sh -c 'awk '"'"'$5 ~ "^/run/" { print $5 }'"'"' /proc/self/mountinfo | sort -r |
      while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf /run/* && mkdir -p /run/netns /run/cni'
  for l in $(on_node ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
    [ "$l" = lo ] || on_node ip link del "$l" 2>/dev/null || true
  done
  # A boot starts with no cgroups. The kubelet's scan takes seconds over each one left of a
  # container the runtime no longer knows, which would slow its start far past a real boot's.
  # A killed process leaves its cgroup busy for a moment, so this tries a few times.
  for _ in 1 2 3 4 5; do
    for c in /sys/fs/cgroup/*/"$cgroup"; do
      find "$c" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    left=$(find /sys/fs/cgroup/*/"$cgroup" -mindepth 1 -type d 2>/dev/null | head -3)
    [ -n "$left" ] || break
    sleep 0.5
  done
  [ -z "$left" ] || die "the pods' cgroups outlived the reboot: $left"
  case ${1:-} in
    --without-multus-config) rm -f "$state"/node/etc/cni/net.d/00-multus.conf "$state"/node/etc/cni/net.d/00-multus.conflist ;;
    # In a config directory of multus's own, under /run, 00-multus.conf is gone already.
    "") ;;
    *) die "reboot takes --without-multus-config" ;;
  esac
  cluster_plugins
  start_runtime
  start_kubelet
}

# For the tests: one part of the node stopped by its PID, or started again as `up` started it.
part() { # stop|start part
  [ -f "$state/runtime" ] || die "no node is up"
  runtime=$(cat "$state/runtime")
  peer_dirs
  case ${2:-} in
    apiserver | etcd | kubelet | "$(runtime_part)") ;;
    *) die "$1 takes apiserver, etcd, kubelet or $(runtime_part)" ;;
  esac
  if [ "$1" = stop ]; then
    stop "$2"
  else
    "start_${2//-/_}"
  fi
}

case ${1:-} in
  up)
    shift
    up "$@"
    ;;
  down) down ;;
  exec)
    shift
    [ "${1:-}" = -- ] && shift
    is_up || die "no node is up"
    # As on a control-plane node: kubectl on the PATH, the admin's kubeconfig.
    kube=$("$root/scripts/peers.sh" dir kubernetes)
    on_node env KUBECONFIG="$state/admin.kubeconfig" PATH="$kube:$PATH" "$@"
    ;;
  stop | start)
    is_up || die "no node is up"
    part "$@"
    ;;
  reboot)
    is_up || die "no node is up"
    shift
    reboot_node "$@"
    ;;
  *) die "usage: scripts/cluster.sh up [thin|thick|thin-per-node-certificate|thick-per-node-certificate|microshift|whereabouts|bare] [--containerd 1|2 | --cri-o] [--own-conf-dir] | exec -- CMD... | stop|start PART | reboot [--without-multus-config] | down" ;;
esac
