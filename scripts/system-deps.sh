#!/usr/bin/env bash
# Install the OS packages Ceiling's node needs when they are missing: numactl (CPU/NUMA
# pinning of engine processes), redis-server (broker + channel layer, embedded default), npm
# (front-end libraries) and chromium (the browser the Playwright tests drive; Debian's package,
# never a browser build downloaded by Playwright). Uses apt-get as root; elsewhere it only says
# what is missing.
set -euo pipefail
missing=()
command -v numactl >/dev/null 2>&1 || missing+=(numactl)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing OS packages: ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "warning: missing OS packages (install them): ${missing[*]}" >&2
fi
