#!/usr/bin/env bash
# Installs headless Chromium from Debian's packages, for the browser test of
# the supervision view (e2e/browser_test.go), and prints the binary's path.
# Idempotent: when a Chromium is on PATH already it installs nothing. Needs
# root (or sudo) and Debian's package archive; the test skips without it.
set -euo pipefail

find_chromium() {
	local name
	for name in chromium chromium-browser; do
		if command -v "$name"; then
			return 0
		fi
	done
	return 1
}

if find_chromium; then
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-chromium: installing chromium from Debian's packages" >&2
"${sudo[@]}" apt-get update -qq >&2
# The fonts are the page's: without any, text renders as boxes.
"${sudo[@]}" apt-get install -y -qq chromium fonts-liberation fonts-dejavu-core >&2
find_chromium || {
	echo "install-chromium: chromium was installed but is not on PATH" >&2
	exit 1
}
