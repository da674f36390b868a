#!/usr/bin/env bash
# Fast lint of deploy/ (seconds, no network, no daemon): promtool check config / check rules /
# test rules on the Prometheus files, the compose Prometheus config, and validate_manifests.py
# (YAML, Kubernetes fields, compose, Envoy, Grafana dashboard JSON and its PromQL metric names).
# usage: lint_test.sh SOURCE_DIR
set -euo pipefail
root=$(cd "${1:?usage: $0 SOURCE_DIR}" && pwd)
prom=$root/deploy/prometheus
for tool in promtool; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found (apt-get install prometheus)"; exit 1; }
done
promtool check config "$prom/prometheus.yml"
promtool check rules "$prom/alerts.yml"
promtool test rules "$prom/rules_test.yml"
/usr/bin/python3 "$root/tests/deploy/validate_manifests.py" "$root"
# Optional: docker-compose's own schema check when the tool is installed (Debian: docker-compose).
if command -v docker-compose >/dev/null 2>&1; then
  docker-compose -f "$root/deploy/docker-compose.yml" config -q
  echo "docker-compose config: OK"
fi
echo "deploy lint: PASS"
