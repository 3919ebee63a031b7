#!/bin/sh
# Makes sure the PostgreSQL server binaries (initdb, postgres) are on this
# machine; coffer's tests and `coffer dev` start their own servers with them.
set -eu
if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
	exit 0
fi
for d in /usr/lib/postgresql/*/bin; do
	[ -x "$d/initdb" ] && [ -x "$d/postgres" ] && exit 0
done
echo "ensure-postgres: PostgreSQL server binaries (initdb, postgres) not found; installing the postgresql package" >&2
"$(dirname "$0")/apt-install.sh" postgresql
