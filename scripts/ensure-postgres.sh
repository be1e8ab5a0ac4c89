#!/usr/bin/env bash
# Start the machine's PostgreSQL cluster if it is installed but not answering on 127.0.0.1:5432.
# Prints nothing and exits 0 when PostgreSQL answers; exits 1 when none can be had.
set -uo pipefail
pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
command -v pg_isready >/dev/null 2>&1 || exit 1
pg_ready && exit 0
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start >/dev/null 2>&1
  for _ in $(seq 1 50); do pg_ready && exit 0; sleep 0.2; done
fi
exit 1
