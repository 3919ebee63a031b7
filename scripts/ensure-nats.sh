#!/bin/sh
# Makes sure nats-server (with JetStream) is on this machine: the change
# feed's tests start their own broker with it. Debian keeps it in
# /usr/sbin, off a normal user's PATH; the tests look there too.
set -eu
if command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; then
	exit 0
fi
echo "ensure-nats: nats-server not found; installing the nats-server package" >&2
"$(dirname "$0")/apt-install.sh" nats-server
