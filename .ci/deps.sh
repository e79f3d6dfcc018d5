#!/usr/bin/env bash
# Installs what building and testing Conquest needs on a Debian machine, as
# root, skipping whatever is already there: fuse3 (fusermount3), a C compiler
# (go test -race), postmark, fio and e2fsprogs (the benchmarks' comparisons),
# stress-ng (an exerciser the e2e tests run through a mount),
# and a Go toolchain at least as new as go.mod asks for.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
command -v postmark >/dev/null || [ -x /usr/bin/postmark ] || need+=(postmark)
command -v fio >/dev/null || need+=(fio)
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || need+=(e2fsprogs)
command -v curl >/dev/null || need+=(curl ca-certificates)

apt_updated=
apt_install() {
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}"
	apt_install "${need[@]}"
fi

# Go: go.mod's "go 1.N" line is the minimum.
want=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' go.mod)
want_minor=$(echo "$want" | cut -d. -f2)
go_ok() {
	local v
	v=$("$1" env GOVERSION 2>/dev/null) || return 1 # go1.26.8
	v=${v#go}
	[ "$(echo "$v" | cut -d. -f1)" = 1 ] && [ "$(echo "$v" | cut -d. -f2)" -ge "$want_minor" ]
}
find_go() {
	for g in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
		if [ -n "$g" ] && [ -x "$g" ] && go_ok "$g"; then
			echo "$g"
			return 0
		fi
	done
	return 1
}
# Debian's golang-go, when its version is new enough (Debian 12's 1.19 is
# not: installing it would only be replaced below).
debian_go_ok() {
	local c
	[ -n "$apt_updated" ] || { apt-get update -qq && apt_updated=1; }
	c=$(LC_ALL=C apt-cache policy golang-go 2>/dev/null | sed -n 's/^ *Candidate: *//p') # 2:1.19~1
	c=${c#*:}
	[ "$(echo "$c" | cut -d. -f1)" = 1 ] || return 1
	c=$(echo "$c" | cut -d. -f2 | sed 's/[^0-9].*//')
	[ -n "$c" ] && [ "$c" -ge "$want_minor" ]
}
if ! find_go >/dev/null && ! command -v go >/dev/null; then
	if debian_go_ok; then
		echo "deps: installing golang-go"
		apt_install golang-go || true
	else
		echo "deps: Debian offers no golang-go of go $want or newer; not installing it"
	fi
fi
if ! find_go >/dev/null; then
	# Debian's golang-go is older than go.mod needs: install the official
	# toolchain (the newest release of go.mod's line) in /usr/local/go, from
	# go.dev, or, where only the Go module proxy is reachable, the same release
	# as the proxy serves it to `go` itself (the golang.org/toolchain module).
	arch=$(dpkg --print-architecture)
	if latest=$(curl -fsSL --max-time 30 'https://go.dev/VERSION?m=text' | head -1) && [ -n "$latest" ]; then
		echo "deps: installing $latest from go.dev into /usr/local/go"
		rm -rf /usr/local/go
		curl -fsSL "https://go.dev/dl/$latest.linux-$arch.tar.gz" | tar -C /usr/local -xz
	else
		proxy=$(echo "${GOPROXY:-https://proxy.golang.org}" | tr ',|' '\n\n' | grep -m1 '^https\?://' || true)
		proxy=${proxy:-https://proxy.golang.org}
		v=$(curl -fsSL --max-time 30 "$proxy/golang.org/toolchain/@v/list" |
			sed -n "s/^v0\.0\.1-\(go1\.$want_minor\(\.[0-9]*\)\?\)\.linux-$arch\$/\1/p" | sort -V | tail -1) || v=
		[ -n "$v" ] || { echo "deps: go.dev and $proxy both unreachable or without go1.$want_minor; install Go >= $want by hand" >&2; exit 1; }
		command -v unzip >/dev/null || apt_install unzip
		echo "deps: go.dev unreachable; installing $v from $proxy into /usr/local/go"
		tmp=$(mktemp -d)
		curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-$v.linux-$arch.zip"
		unzip -q "$tmp/go.zip" -d "$tmp"
		rm -rf /usr/local/go
		mv "$tmp/golang.org/toolchain@v0.0.1-$v.linux-$arch" /usr/local/go
		rm -rf "$tmp"
		# A module zip keeps no file modes: the commands get theirs back, as
		# cmd/go does for a toolchain it downloads.
		chmod 0755 /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
	fi
fi
g=$(find_go) || { echo "deps: no Go >= $want found" >&2; exit 1; }
echo "deps: using $g ($("$g" env GOVERSION)); fusermount3 at $(command -v fusermount3)"
if [ ! -e /dev/fuse ]; then
	modprobe fuse 2>/dev/null || true
	[ -e /dev/fuse ] || echo "deps: warning: no /dev/fuse; tests that mount will be skipped" >&2
fi
