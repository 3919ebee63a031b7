#!/bin/sh
# Installs the Debian packages given that are missing, as root or with sudo.
set -eu
missing=""
for p in "$@"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "apt-install: need root to install:$missing; run as root: apt-get install -y$missing" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "apt-install: not a Debian/Ubuntu machine; install these packages yourself:$missing" >&2
	exit 1
fi
echo "apt-install: installing$missing" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $missing >&2
