#!/usr/bin/env bash
# e2e-binaries.sh builds, or reuses, the kube-apiserver and etcd binaries that the
# end-to-end suite in e2e/ runs, and prints the directory holding them on its last
# stdout line, so that a caller can do:
#
#   export KUBEBUILDER_ASSETS="$(hack/e2e-binaries.sh | tail -n1)"
#
# The binaries are built from source through the Go module proxy, because that is the
# only registry this project's machines reach: no release tarball is downloaded.
#
# Where they go: ${E2E_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/actorkube-controllermanager/e2e-bin}/<k8s>-<etcd>/
# outside the repository, keyed by both versions so that bumping one builds a new pair.
#
# Environment:
#   E2E_KUBE_VERSION  Kubernetes release to build, default v1.37.2
#   E2E_ETCD_VERSION  etcd release to build, default v3.7.0
#   E2E_BIN_CACHE     cache root (see above)
#
# Idempotent: when both binaries exist and answer --version with the wanted versions,
# nothing is built. Each binary is built into a temporary file beside its final name
# and renamed into place, so an interrupted build never leaves a broken binary; a lock
# serialises concurrent callers (two test packages starting at once build once).
#
# A cold build takes several minutes and a few GB of Go build cache; everything except
# the last stdout line goes to stderr.
set -euo pipefail

kube_version="${E2E_KUBE_VERSION:-v1.37.2}"
etcd_version="${E2E_ETCD_VERSION:-v3.7.0}"
cache_root="${E2E_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/actorkube-controllermanager/e2e-bin}"
bin_dir="${cache_root}/${kube_version}-${etcd_version}"

log() { printf 'e2e-binaries: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$kube_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "E2E_KUBE_VERSION must look like v1.37.2, got ${kube_version}"
kube_minor="${BASH_REMATCH[1]}"
# The staging modules (k8s.io/api, k8s.io/apiserver, ...) are tagged v0.X.Y for Kubernetes v1.X.Y.
staging_version="v0.${kube_minor}.${BASH_REMATCH[2]}"
[[ "$etcd_version" =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "E2E_ETCD_VERSION must look like v3.7.0, got ${etcd_version}"

command -v go >/dev/null || die "go is not on PATH"

# binary_ok PATH WANT: PATH runs and its --version output contains WANT.
binary_ok() {
	[[ -x "$1" ]] || return 1
	local out
	out="$("$1" --version 2>/dev/null)" || return 1
	[[ "$out" == *"$2"* ]]
}

# "Kubernetes v1.37.2" and "etcd Version: 3.7.0" are what the two binaries print.
kube_want="Kubernetes ${kube_version}"
etcd_want="etcd Version: ${etcd_version#v}"

both_ok() {
	binary_ok "${bin_dir}/kube-apiserver" "$kube_want" && binary_ok "${bin_dir}/etcd" "$etcd_want"
}

if both_ok; then
	log "reusing ${bin_dir}"
	printf '%s\n' "$bin_dir"
	exit 0
fi

mkdir -p "$bin_dir"
# Another caller may be building the same pair right now: wait for it, then look again.
if command -v flock >/dev/null; then
	exec 9>"${bin_dir}/.lock"
	flock 9
	if both_ok; then
		log "reusing ${bin_dir} (built by a concurrent caller)"
		printf '%s\n' "$bin_dir"
		exit 0
	fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/e2e-binaries.XXXXXX")"
partial=""
cleanup() {
	rm -rf "$work"
	if [[ -n "$partial" ]]; then rm -f "$partial"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The wrapper modules below live in a temp dir outside any workspace; they must not see
# a go.work, and static binaries need no C toolchain.
export GOWORK=off CGO_ENABLED=0
# Build flags shared by both binaries: stripped, and no local paths baked in.
build_flags=(-mod=mod -trimpath)

# install_built TMP FINAL WANT: check the fresh binary, then move it into place atomically.
install_built() {
	binary_ok "$1" "$3" || die "$(basename "$2") was built but '$1 --version' does not report '$3'"
	mv -f "$1" "$2"
	partial=""
}

build_kube_apiserver() {
	local mod_dir="${work}/kube-apiserver"
	mkdir -p "$mod_dir"
	log "downloading k8s.io/kubernetes@${kube_version}"
	local kube_dir
	kube_dir="$(cd "$mod_dir" && go mod download -json "k8s.io/kubernetes@${kube_version}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -n "$kube_dir" && -f "${kube_dir}/go.mod" ]] || die "could not download k8s.io/kubernetes@${kube_version}"

	# k8s.io/kubernetes replaces its staging modules with ./staging/src/... folders, which
	# `go install pkg@version` refuses. Its own replace block is the authoritative list of
	# those modules: replace each with the published copy at the matching v0.X.Y tag.
	local staging
	staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "${kube_dir}/go.mod")"
	[[ -n "$staging" ]] || die "found no staging replaces in ${kube_dir}/go.mod"
	local go_directive
	go_directive="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "${kube_dir}/go.mod")"

	{
		printf 'module e2e.local/kube-apiserver\n\ngo %s\n\n' "$go_directive"
		# Keep Kubernetes' own GODEBUG defaults: they only apply in a main module.
		grep '^godebug ' "${kube_dir}/go.mod" || true
		printf '\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$kube_version"
		local m
		for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$staging_version"; done
		printf ')\n'
	} >"${mod_dir}/go.mod"
	log "kube-apiserver wrapper replaces $(wc -w <<<"$staging") staging modules with ${staging_version}"

	# Without these the server reports v0.0.0-master, whose /version clients cannot parse.
	local v=k8s.io/component-base/version
	local ldflags="-s -w -X ${v}.gitVersion=${kube_version} -X ${v}.gitMajor=1 -X ${v}.gitMinor=${kube_minor} -X ${v}.gitTreeState=clean"

	partial="${bin_dir}/.kube-apiserver.$$.tmp"
	log "building kube-apiserver ${kube_version} (a cold build takes several minutes)"
	(cd "$mod_dir" && go build "${build_flags[@]}" -ldflags "$ldflags" -o "$partial" k8s.io/kubernetes/cmd/kube-apiserver)
	install_built "$partial" "${bin_dir}/kube-apiserver" "$kube_want"
}

build_etcd() {
	local mod_dir="${work}/etcd"
	mkdir -p "$mod_dir"
	local etcd_dir
	etcd_dir="$(cd "$mod_dir" && go mod download -json "go.etcd.io/etcd/server/v3@${etcd_version}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -n "$etcd_dir" && -f "${etcd_dir}/go.mod" ]] || die "could not download go.etcd.io/etcd/server/v3@${etcd_version}"
	local go_directive
	go_directive="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "${etcd_dir}/go.mod")"
	# go.etcd.io/etcd/server/v3 replaces its sibling modules with ../ folders, so it cannot
	# be installed by version either; a main in a wrapper module that requires it builds.
	printf 'module e2e.local/etcd\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
		"$go_directive" "$etcd_version" >"${mod_dir}/go.mod"
	cat >"${mod_dir}/main.go" <<-'EOF'
		// Command etcd is etcd's own server main, built from the published module.
		package main

		import (
			"os"

			"go.etcd.io/etcd/server/v3/etcdmain"
		)

		func main() { etcdmain.Main(os.Args) }
	EOF
	partial="${bin_dir}/.etcd.$$.tmp"
	log "building etcd ${etcd_version}"
	(cd "$mod_dir" && go build "${build_flags[@]}" -ldflags "-s -w" -o "$partial" .)
	install_built "$partial" "${bin_dir}/etcd" "$etcd_want"
}

start=$SECONDS
binary_ok "${bin_dir}/etcd" "$etcd_want" || build_etcd
binary_ok "${bin_dir}/kube-apiserver" "$kube_want" || build_kube_apiserver
both_ok || die "binaries in ${bin_dir} do not run"
log "built into ${bin_dir} in $((SECONDS - start))s"
printf '%s\n' "$bin_dir"
