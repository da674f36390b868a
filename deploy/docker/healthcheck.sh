#!/bin/bash
# Container HEALTHCHECK for linfer: GET /health on the HTTP port must answer 200 (503 = draining).
# Pure bash (/dev/tcp), so the runtime image needs no curl. Port and host from the environment:
# LINFER_HTTP_PORT (default 8000) and LINFER_HEALTH_HOST (default 127.0.0.1).
host=${LINFER_HEALTH_HOST:-127.0.0.1}
port=${LINFER_HTTP_PORT:-8000}
exec 3<>"/dev/tcp/${host}/${port}" || exit 1
printf 'GET /health HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3
IFS= read -r -t 3 status <&3 || exit 1
exec 3<&-
case "$status" in
  "HTTP/"*" 200 "*) exit 0 ;;
  *) echo "unhealthy: ${status%$'\r'}"; exit 1 ;;
esac
