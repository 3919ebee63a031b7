#!/bin/sh
# Builds the C# client and its tests (test/) with Mono's mcs into the
# directory given (a new temporary one by default), then runs the tests
# with mono against the coffer that COFFER_URL and COFFER_API_KEY name.
# The client is built as a library and the tests reference it, as a game
# server would; with debug symbols, so that a failure names its line.
set -eu
cd "$(dirname "$0")"
out=${1:-$(mktemp -d)}
mcs="mcs -langversion:7 -warnaserror -nologo -debug -r:System.Net.Http.dll"
$mcs -target:library -out:"$out/Coffer.Client.dll" -recurse:'src/*.cs'
$mcs -target:exe -r:"$out/Coffer.Client.dll" -out:"$out/story.exe" -recurse:'test/*.cs'
exec mono --debug "$out/story.exe"
