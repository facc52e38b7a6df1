#!/usr/bin/env bash
# The real upstream peers, built with `go build` from their Go modules (through the module proxy)
# and cached outside the clone, one directory per peer and version, for the tests and benchmarks
# that run them beside ours.
#
#   scripts/peers.sh build <peer>...  builds what is missing; prints each peer's directory
#   scripts/peers.sh dir <peer>       prints the directory; exit 1 when it is not built
#   scripts/peers.sh list             the peers and their pinned versions
#   scripts/peers.sh kube-replaces <k8s.io/kubernetes version>
#                                     the replace block for test-support/peers/kubernetes/go.mod
#
# Peers: cni-plugins multus whereabouts containerd cri-o kubernetes etcd kube-api-protos (not a
# build: the Kubernetes API's .proto files, which testkit's API server reads protobuf bodies with).
#
# Each peer is a small module of ours, test-support/peers/<peer>/go.mod, that requires exactly
# the pinned upstream version; its go.sum pins everything beneath it and the builds run with
# -mod=readonly. A peer module may hold a program of ours built against upstream's packages
# (multus's delegate-client). The version is read from that go.mod: to move a peer, change its require line
# (and the replace lines beside it) and run `go mod tidy` there.
#
# Everything is built with CGO_ENABLED=0: static binaries that do not depend on the machine's
# libc. Upstream builds the reference plugins, multus, whereabouts, etcd, the containerd shim and
# most of Kubernetes that way too; containerd and the kubelet lose only what this project does not
# use (containerd's btrfs snapshotter; the kubelet has no cgo-only feature on Linux). CRI-O loses
# seccomp, which the node's pods do not ask for; its pinns is C, and static too.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
modules=$root/test-support/peers
cache=${MULTUS_RS_PEERS_CACHE:-/var/cache/multus-rs-test}
# Raised whenever the way a peer is built changes (flags, names, binaries), so that directories
# built the old way are built again: one number for every peer, and one for a peer alone.
recipe=1
recipe_of() { # peer
  case $1 in
    # 2: also for arm64, into arm64/.
    cni-plugins) echo "$recipe.2" ;;
    *) echo "$recipe" ;;
  esac
}

peers=(cni-plugins multus whereabouts containerd cri-o kubernetes etcd kube-api-protos)

# The upstream module whose version names a peer's directory.
main_module() {
  case $1 in
    cni-plugins) echo github.com/containernetworking/plugins ;;
    multus) echo gopkg.in/k8snetworkplumbingwg/multus-cni.v4 ;;
    whereabouts) echo github.com/k8snetworkplumbingwg/whereabouts ;;
    containerd) echo github.com/containerd/containerd/v2 ;;
    cri-o) echo github.com/cri-o/cri-o ;;
    kubernetes) echo k8s.io/kubernetes ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kube-api-protos) echo k8s.io/api ;;
    *)
      echo "unknown peer: $1 (peers: ${peers[*]})" >&2
      exit 2
      ;;
  esac
}

# The version a go.mod requires of a module, read without running go: both `require m v` and a
# line of a require block.
required() { # go.mod module
  awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}

version() { # peer
  local v
  v=$(required "$modules/$1/go.mod" "$(main_module "$1")")
  if [ -z "$v" ]; then
    echo "$modules/$1/go.mod does not require $(main_module "$1")" >&2
    exit 2
  fi
  echo "$v"
}

# What a built directory was built from: the recipe and the peer's go.mod, go.sum and .go files
# (containerd's include crictl's). A directory whose stamp differs is built again.
stamp() { # peer
  echo "recipe $(recipe_of "$1")"
  (cd "$modules/$1" && find . -name go.mod -o -name go.sum -o -name '*.go' | LC_ALL=C sort | xargs sha256sum)
}

dir_of() { echo "$cache/$1-$(version "$1")"; }

built() { # peer
  local d
  d=$(dir_of "$1")
  [ -f "$d/.peer-stamp" ] && [ "$(cat "$d/.peer-stamp")" = "$(stamp "$1")" ]
}

find_go() {
  if command -v go >/dev/null; then
    command -v go
  elif [ -x /usr/local/go/bin/go ]; then
    echo /usr/local/go/bin/go
  else
    echo "go is not on PATH nor at /usr/local/go/bin/go; the peers are built with Go 1.26 or later" >&2
    exit 1
  fi
}

# go build in the peer's module, at the lowest CPU priority: the builds share the machine with
# the tests. Runs in a subshell so that each module is the current directory of its own build.
gob() { # module-dir args...
  local dir=$1
  shift
  (cd "$dir" && nice -n 19 "$GO" build "$@")
}

build_cni_plugins() { # out version
  # The release's one ldflag: the version `CNI_COMMAND=VERSION` and the about string report.
  local flags="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$2"
  gob "$modules/cni-plugins" -o "$1/" -ldflags "$flags" tool
  # For the side-by-side cases in the aarch64 guest (cargo xtask vm-test aarch64).
  mkdir "$1/arm64"
  GOARCH=arm64 gob "$modules/cni-plugins" -o "$1/arm64/" -ldflags "$flags" tool
}

build_multus() { # out version
  local p=gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/multus
  gob "$modules/multus" -o "$1/" \
    -ldflags "-X $p.version=$2 -X $p.gitTreeState=clean -X $p.releaseStatus=,released" tool
  # Upstream's name for cmd/passthru-cni (hack/build-go.sh).
  mv "$1/passthru-cni" "$1/passthru"
  # Ours: /delegate requests as multus-dynamic-networks-controller makes them.
  gob "$modules/multus" -o "$1/" ./delegate-client
}

build_whereabouts() { # out version
  local p=github.com/k8snetworkplumbingwg/whereabouts/pkg/version
  gob "$modules/whereabouts" -o "$1/" \
    -ldflags "-X $p.Version=$2 -X $p.GitTreeState=clean -X $p.ReleaseStatus=released" tool
  # Upstream's names (hack/build-go.sh): the plugin is the package cmd itself.
  mv "$1/cmd" "$1/whereabouts"
  mv "$1/controlloop" "$1/ip-control-loop"
  mv "$1/reconciler" "$1/ip-reconciler"
  mv "$1/nodeslicecontroller" "$1/node-slice-controller"
}

build_containerd() { # out version
  local m=github.com/containerd/containerd/v2 crictl_version
  # Upstream's Makefile: stripped, urfave_cli_no_docs, and the shim without gRPC.
  local ld="-s -w -X $m/version.Version=$2 -X $m/version.Package=$m"
  gob "$modules/containerd" -o "$1/" -tags urfave_cli_no_docs -ldflags "$ld" \
    $m/cmd/containerd $m/cmd/ctr
  gob "$modules/containerd" -o "$1/" -tags "urfave_cli_no_docs no_grpc" -ldflags "$ld" \
    $m/cmd/containerd-shim-runc-v2
  # crictl is a module of its own, pinned beside containerd's.
  crictl_version=$(required "$modules/containerd/crictl/go.mod" sigs.k8s.io/cri-tools)
  gob "$modules/containerd/crictl" -o "$1/" \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" tool
}

build_cri_o() { # out version
  local m=github.com/cri-o/cri-o src
  # Upstream's tags for a build without the C libraries this project does not use: no ostree,
  # btrfs or gpgme, and no seccomp (the node's pods run unconfined, as the kubelet's default
  # asks).
  gob "$modules/cri-o" -o "$1/" \
    -tags "containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion containers_image_openpgp" \
    -ldflags "-s -w" tool
  # pinns, static as upstream's pinns/Makefile makes it, from the module go build just used.
  src=$(cd "$modules/cri-o" && "$GO" list -m -f '{{.Dir}}' "$m")
  nice -n 19 gcc -std=c99 -Os -Wall -Wextra -static -s -o "$1/pinns" "$src"/pinns/src/*.c
}

build_kubernetes() { # out version
  # hack/lib/version.sh and golang.sh: the version in both version packages, stripped, and
  # upstream's tags.
  local v=$2 major minor ld="-s -w" p
  major=${v#v}
  major=${major%%.*}
  minor=${v#v*.}
  minor=${minor%%.*}
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  gob "$modules/kubernetes" -o "$1/" -tags selinux,notest,grpcnotrace -ldflags "$ld" tool
}

build_etcd() { # out version
  # etcd's version is a constant of its api module; upstream's build sets only the git commit,
  # which a module download does not carry.
  gob "$modules/etcd" -o "$1/" tool
  # The etcd main is the root package of go.etcd.io/etcd/server/v3; upstream names it etcd.
  mv "$1/server" "$1/etcd"
}

build_kube_api_protos() { # out version
  # The modules' generated.proto files, under their import paths (k8s.io/api/core/v1/...), and
  # inline.txt: the fields of a message that JSON inlines (a Go struct embedded with an empty
  # JSON name, such as Probe's handler), one "package.Message field" a line.
  local m dir f
  for m in k8s.io/api k8s.io/apimachinery; do
    dir=$(cd "$modules/kube-api-protos" && "$GO" mod download -json "$m" | awk -F'"' '$2 == "Dir" { print $4 }')
    [ -d "$dir" ] || return 1
    while read -r f; do
      f=${f#./}
      case $f in
        */generated.proto)
          mkdir -p "$1/$m/$(dirname "$f")"
          cp "$dir/$f" "$1/$m/$f"
          ;;
        *)
          awk -v pkg="$m/$(dirname "$f")" '
            /^type [A-Za-z0-9_]+ struct/ { type = $2 }
            /^[ \t]+\*?[A-Za-z0-9_.]+ +`json:"(,inline)?"/ && /protobuf:"/ {
              name = $0
              if (sub(/.*protobuf:"[^"]*name=/, "", name)) { sub(/[^A-Za-z0-9_].*/, "", name) }
              else { name = $1; sub(/.*\./, "", name); name = tolower(substr(name, 1, 1)) substr(name, 2) }
              gsub("/", ".", pkg); print pkg "." type, name
            }' "$dir/$f" >>"$1/inline.txt"
          ;;
      esac
    done < <(cd "$dir" && find . -name generated.proto -o -name types.go)
  done
}

build_one() { # peer
  local peer=$1 v d tmp start
  v=$(version "$peer")
  d=$(dir_of "$peer")
  if built "$peer"; then
    echo "$d"
    return
  fi
  mkdir -p "$cache"
  # One build of a peer at a time; a second caller waits and then finds it built.
  exec {lock}>"$cache/.$peer.lock"
  flock "$lock"
  if ! built "$peer"; then
    tmp=$(mktemp -d "$cache/.$peer-$v.XXXXXX")
    # A build cache of the build's own, removed after it: a peer is built once per version, so
    # nothing reuses it (the shared one held 6.7 GB after the peers' builds).
    export GOCACHE=$tmp.gocache
    # shellcheck disable=SC2064 # the paths are fixed now
    trap "rm -rf '$tmp' '$GOCACHE'" EXIT
    echo "building $peer $v into $d" >&2
    start=$SECONDS
    # stdout carries only the directories.
    "build_${peer//-/_}" "$tmp" "$v" >&2
    stamp "$peer" >"$tmp/.peer-stamp"
    chmod 755 "$tmp"
    # Atomic for readers: the finished directory appears under its name in one rename; a stale
    # one (an older recipe) is moved aside first and removed after.
    if [ -e "$d" ]; then
      mv -T "$d" "$tmp.old"
    fi
    mv -T "$tmp" "$d"
    rm -rf "$tmp.old" "$GOCACHE"
    trap - EXIT
    echo "built $peer $v in $((SECONDS - start)) s" >&2
  fi
  exec {lock}>&-
  echo "$d"
}

# The replace lines that stand in for k8s.io/kubernetes's ./staging/src/k8s.io/* replaces: each
# staging module that its go.mod requires, at the matching v0.x version.
kube_replaces() { # version
  local v=$1 mod
  mod=$(GOFLAGS=-mod=mod "$GO" mod download -json "k8s.io/kubernetes@$v" | awk -F'"' '$2 == "GoMod" { print $4 }')
  echo "replace ("
  awk -v staging="v0.${v#v1.}" '
    /^require/ { req = 1; next }
    req && /^\)/ { req = 0 }
    req && $1 ~ /^k8s\.io\// { required[$1] = 1 }
    $2 == "=>" && $3 ~ /^\.\/staging\// && ($1 in required) { printf "\t%s => %s %s\n", $1, $1, staging }
  ' "$mod"
  echo ")"
}

# The Go on this machine (1.26 or later) unless GOTOOLCHAIN says otherwise; no go.work of a
# parent directory.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOWORK=off CGO_ENABLED=0
# Reproducible and pinned: the checked-in go.sum, no paths of this machine in the binaries.
export GOFLAGS="-mod=readonly -trimpath -buildvcs=false"

case ${1:-} in
  build)
    shift
    [ $# -gt 0 ] || set -- "${peers[@]}"
    GO=$(find_go)
    for p in "$@"; do
      main_module "$p" >/dev/null
      build_one "$p"
    done
    ;;
  dir)
    [ $# -eq 2 ] || {
      echo "usage: $0 dir <peer>" >&2
      exit 2
    }
    main_module "$2" >/dev/null
    built "$2" || exit 1
    dir_of "$2"
    ;;
  list)
    for p in "${peers[@]}"; do
      printf '%-12s %s %s\n' "$p" "$(version "$p")" "$(built "$p" && dir_of "$p" || echo '(not built)')"
    done
    ;;
  kube-replaces)
    [ $# -eq 2 ] || {
      echo "usage: $0 kube-replaces <k8s.io/kubernetes version>" >&2
      exit 2
    }
    GO=$(find_go)
    kube_replaces "$2"
    ;;
  *)
    echo "usage: $0 build [peer...] | dir <peer> | list | kube-replaces <version>" >&2
    echo "peers: ${peers[*]}" >&2
    exit 2
    ;;
esac
