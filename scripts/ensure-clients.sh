#!/bin/sh
# Makes sure the clients' tests (TestClients in cmd/coffer) can run, and
# run the clients as they are now: a Python virtual environment under
# .cache/clients/venv, made once, with pytest and the Python client
# installed from clients/python (again on every run, so that the tests
# see the current source; with the venv's setuptools, not a new one
# fetched for each build, and the wheel package its builds need), and clients/typescript's
# dev dependencies (TypeScript, Node's types) in its node_modules.
# Installs Python's venv module, Node.js and npm, and Mono's C# compiler
# and runtime (with System.Net.Http) for the C# client, from Debian when
# missing.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || "$root/scripts/apt-install.sh" python3 python3-venv
{ command -v node && command -v npm; } >/dev/null 2>&1 || "$root/scripts/apt-install.sh" nodejs npm
{ command -v mcs && command -v mono; } >/dev/null 2>&1 || "$root/scripts/apt-install.sh" mono-mcs mono-runtime libmono-system-net-http4.0-cil
venv=$root/.cache/clients/venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip="$venv/bin/python -m pip --disable-pip-version-check -q"
"$venv/bin/python" -c "import setuptools, wheel" 2>/dev/null || $pip install "setuptools>=68" wheel
$pip install --no-build-isolation "$root/clients/python[test]"
cd "$root/clients/typescript"
npm install --no-audit --no-fund --loglevel=error
