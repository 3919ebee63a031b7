#!/bin/sh
# Makes sure Patroni and etcd are on this machine for the fault suite's
# Patroni run (TestTorturePatroni, `coffer torture --patroni`). As root (or
# with sudo) it installs Debian's packages; otherwise it says what to
# install, and that test is skipped: the rest of `make test` does not need
# them.
set -eu
if command -v patroni >/dev/null 2>&1 && command -v patronictl >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
	echo "ensure-patroni: Patroni and etcd are not installed, so TestTorturePatroni will be skipped; to run it: apt-get install -y patroni etcd-server (as root)" >&2
	exit 0
fi
echo "ensure-patroni: Patroni or etcd not found; installing the patroni and etcd-server packages" >&2
"$(dirname "$0")/apt-install.sh" patroni etcd-server
