#!/usr/bin/env bash
# Builds llm-d's endpoint picker (cmd/epp of github.com/llm-d/llm-d-router) at
# a pinned version from its public source, for the cross-implementation EPP
# conformance run (epp/llmd_test.go, docs/results/epp-conformance.md).
#
#   scripts/llmd-epp/build.sh [OUT]     # OUT defaults to bin/llmd-epp
#
# Then: LLMD_EPP_BIN=$PWD/bin/llmd-epp go test -run TestCrossImpl -v ./epp
#
# Where the source comes from, first that works:
#   1. LLMD_ROUTER_GIT=DIR: a git directory (a clone or a bare mirror) that has
#      the pinned commit;
#   2. the Go module proxy: go install MODULE/cmd/epp@VERSION;
#   3. git clone of https://github.com/llm-d/llm-d-router.
# Its dependencies come from the Go module proxy (GOPROXY). It is built with
# CGO_ENABLED=0, as the project's own Dockerfile.epp builds it.
set -euo pipefail

VERSION=v0.9.0
COMMIT=5f4e762f341a5196393ce79f8a57c3e1900c4a6b
MODULE=github.com/llm-d/llm-d-router
REPO_URL=https://github.com/llm-d/llm-d-router
MIN_GO=1.25.11 # the go directive of its go.mod at $VERSION

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bin/llmd-epp}
case $out in /*) ;; *) out=$PWD/$out ;; esac

die() { echo "llmd-epp build: $*" >&2; exit 1; }

command -v go >/dev/null || die "no 'go' on PATH: install Go $MIN_GO or newer"
have=$(go env GOVERSION) || die "'go env GOVERSION' failed"
have=${have#go}
if [ "$(printf '%s\n%s\n' "$MIN_GO" "$have" | sort -V | head -1)" != "$MIN_GO" ] &&
	[ "$(go env GOTOOLCHAIN)" = local ]; then
	die "Go $have is older than $MIN_GO (llm-d-router $VERSION's go.mod) and GOTOOLCHAIN=local forbids a download"
fi
proxy=$(go env GOPROXY)
[ "$proxy" != off ] || die "GOPROXY=off: the dependencies come from the Go module proxy"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$(dirname "$out")"

build_from_git() { # $1: git dir
	local rev
	rev=$(git --git-dir="$1" rev-parse --verify -q "$COMMIT^{commit}") ||
		die "$1 lacks commit $COMMIT ($VERSION): fetch the tag first"
	echo "llmd-epp build: source $VERSION ($rev) from $1" >&2
	git --git-dir="$1" archive "$COMMIT" | tar -x -C "$tmp/src"
	echo "llmd-epp build: downloading its dependencies through $proxy" >&2
	(cd "$tmp/src" && go mod download) ||
		die "go mod download failed: the module proxy ($proxy) must be reachable"
	(cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X $MODULE/version.CommitSHA=$COMMIT -X $MODULE/version.BuildRef=$VERSION" \
		-o "$out" ./cmd/epp) || die "go build ./cmd/epp failed"
}

mkdir -p "$tmp/src"
if [ -n "${LLMD_ROUTER_GIT:-}" ]; then
	gd=$LLMD_ROUTER_GIT
	[ -d "$gd/.git" ] && gd=$gd/.git
	build_from_git "$gd"
elif GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp/gobin" \
	go install -trimpath -ldflags "-s -w" "$MODULE/cmd/epp@$VERSION" 2>"$tmp/install.log"; then
	echo "llmd-epp build: $MODULE/cmd/epp@$VERSION from the module proxy" >&2
	mv "$tmp/gobin/epp" "$out"
else
	echo "llmd-epp build: the module proxy does not serve $MODULE@$VERSION:" >&2
	sed 's/^/  /' "$tmp/install.log" >&2
	echo "llmd-epp build: cloning $REPO_URL" >&2
	git clone -q --bare --filter=blob:none "$REPO_URL" "$tmp/git" ||
		die "neither the module proxy nor $REPO_URL could be reached: set LLMD_ROUTER_GIT to a clone"
	build_from_git "$tmp/git"
fi
echo "llmd-epp build: installed llm-d's EPP $VERSION ($COMMIT) at $out" >&2
