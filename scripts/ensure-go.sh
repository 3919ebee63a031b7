#!/bin/sh
# Prints the path of a Go toolchain new enough for go.mod, installing one
# under .cache/go from the Go module proxy if the machine has none.
set -eu
need_minor=26
version_ok() {
	v=$("$1" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
	[ -n "$v" ] && [ "$v" -ge "$need_minor" ]
}
if command -v go >/dev/null 2>&1 && version_ok go; then
	echo go
	exit 0
fi
root=$(cd "$(dirname "$0")/.." && pwd)
local_go="$root/.cache/go/bin/go"
if [ -x "$local_go" ] && version_ok "$local_go"; then
	echo "$local_go"
	exit 0
fi
version=go1.26.8
case $(uname -m) in
	x86_64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) echo "ensure-go: no Go for $(uname -m); install Go 1.$need_minor or newer" >&2; exit 1 ;;
esac
echo "ensure-go: Go 1.$need_minor+ not found; installing $version into .cache/go (from proxy.golang.org)" >&2
"$root/scripts/apt-install.sh" curl unzip ca-certificates >&2
tmp=$(mktemp -d)
curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$version.linux-$arch.zip"
unzip -q "$tmp/go.zip" -d "$tmp"
rm -rf "$root/.cache/go"
mkdir -p "$root/.cache"
mv "$tmp/golang.org/toolchain@v0.0.1-$version.linux-$arch" "$root/.cache/go"
chmod +x "$root/.cache/go/bin/"* "$root/.cache/go/pkg/tool/"*/* 2>/dev/null || true
rm -rf "$tmp"
echo "$local_go"
