#!/bin/sh
# Prints the path of the `st` command of Schemathesis, the OpenAPI fuzzer
# that TestSchemathesis runs against `coffer dev` (make fuzz-api),
# installing the pinned version from PyPI into a virtual environment under
# .cache/schemathesis if it is not there. Needs python3 with venv; on
# Debian/Ubuntu they are installed when missing.
set -eu
version=4.32.5
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.cache/schemathesis"
st="$venv/bin/st"
if [ -x "$st" ] && [ "$("$st" --version 2>/dev/null)" = "st, version $version" ]; then
	echo "$st"
	exit 0
fi
echo "ensure-schemathesis: installing Schemathesis $version into .cache/schemathesis (from PyPI)" >&2
command -v python3 >/dev/null 2>&1 || "$root/scripts/apt-install.sh" python3 >&2
rm -rf "$venv"
mkdir -p "$root/.cache"
if ! python3 -m venv "$venv" >/dev/null 2>&1; then
	# Debian splits venv (and the pip it installs) out of python3.
	"$root/scripts/apt-install.sh" python3-venv >&2
	rm -rf "$venv"
	python3 -m venv "$venv" >&2
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version" >&2
echo "$st"
