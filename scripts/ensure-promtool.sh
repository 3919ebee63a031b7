#!/bin/sh
# Prints the path of promtool, Prometheus's rule checker, for the deploy
# test (alerting rules, the dashboard's queries). When the machine has
# none, it takes promtool alone out of Debian's prometheus package into
# .cache/promtool: installing the package would also start a Prometheus
# server, on 9090, the port `coffer dev` serves gRPC on.
set -eu
if command -v promtool >/dev/null 2>&1; then
	command -v promtool
	exit 0
fi
root=$(cd "$(dirname "$0")/.." && pwd)
local_promtool="$root/.cache/promtool/usr/bin/promtool"
if [ -x "$local_promtool" ]; then
	echo "$local_promtool"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-promtool: not a Debian/Ubuntu machine; install promtool (Prometheus) yourself" >&2
	exit 1
fi
echo "ensure-promtool: promtool not found; taking it from Debian's prometheus package into .cache/promtool" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download -qq prometheus >&2); then
	# The package lists are missing or old: update them (root or sudo).
	sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	(cd "$tmp" && apt-get download -qq prometheus >&2)
fi
rm -rf "$root/.cache/promtool"
mkdir -p "$root/.cache/promtool"
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
mkdir -p "$root/.cache/promtool/usr/bin"
mv "$tmp/x/usr/bin/promtool" "$local_promtool"
echo "$local_promtool"
