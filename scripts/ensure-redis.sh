#!/usr/bin/env bash
# Make sure a real Redis answers at $REDIS_URL (default redis://127.0.0.1:6379/0).
# If none answers and the URL points at this machine, start redis-server in the background
# (no persistence; data dir under var/redis).
set -euo pipefail
url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
hostport="${url#redis://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$host" ] && port=6379
if redis-cli -h "$host" -p "$port" ping 2>/dev/null | grep -q PONG; then
  exit 0
fi
case "$host" in
  127.0.0.1|localhost|::1) ;;
  *) echo "error: Redis at $url does not answer and is not local; start it first" >&2; exit 1 ;;
esac
mkdir -p var/redis
echo "starting redis-server on $host:$port"
redis-server --daemonize yes --bind "$host" --port "$port" --save "" --appendonly no \
  --dir "$(pwd)/var/redis" --logfile "$(pwd)/var/redis/redis.log"
for _ in $(seq 1 50); do
  redis-cli -h "$host" -p "$port" ping 2>/dev/null | grep -q PONG && exit 0
  sleep 0.1
done
echo "error: redis-server did not answer on $host:$port (see var/redis/redis.log)" >&2
exit 1
