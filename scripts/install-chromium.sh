#!/usr/bin/env sh
# The console's browser tests drive the system's Chromium (Debian's `chromium` package, through Playwright). Install
# it when it is missing; on a machine that already has it this does nothing.
set -eu
if command -v chromium >/dev/null 2>&1 || [ -n "${ORBITAL_CHROMIUM:-}" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "Chromium is missing and this is no Debian-like system: install Chromium, or set ORBITAL_CHROMIUM" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing Chromium for the console's browser tests"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version
