#!/usr/bin/python3
"""Lint of deploy/: YAML parses, required fields of the Kubernetes manifests, the compose stack,
the Envoy gateway config, the Grafana provisioning and dashboard, the Dockerfile's essentials, and
that every linfer_ metric used in the dashboard, the alert rules and the adapter rules exists.

usage: /usr/bin/python3 validate_manifests.py SOURCE_DIR

Metric names come from server/metrics.cc (the names registered with prometheus-cpp; histograms add
_bucket, _sum and _count). Uses only Debian's python3-yaml. Exit 1 with a list of problems.
"""
import glob
import json
import os
import re
import sys

import yaml

errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def rel(path):
    return os.path.relpath(path, ROOT)


def load_yaml_docs(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        err(rel(path), f"YAML does not parse: {e}")
        return []


def get(obj, dotted, default=None):
    cur = obj
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return default
    return cur


def require(obj, where, *paths):
    ok = True
    for p in paths:
        if get(obj, p) in (None, "", [], {}):
            err(where, f"missing {p}")
            ok = False
    return ok


# ---------------------------------------------------------------------------------------------
# Metric names
def known_metrics():
    src = open(os.path.join(ROOT, "server", "metrics.cc")).read()
    names = set(re.findall(r'"(linfer_[a-z0-9_]+)"', src))
    hist = set(re.findall(r'histogram\(\s*"(linfer_[a-z0-9_]+)"', src))
    hist |= set(re.findall(r'BuildHistogram\(\)\s*\.Name\("(linfer_[a-z0-9_]+)"\)', src))
    for h in hist:
        names |= {h + "_bucket", h + "_sum", h + "_count"}
    if len(names) < 10 or not hist:
        err("server/metrics.cc", f"could not read the metric names (found {sorted(names)})")
    return names, hist


METRIC_RE = re.compile(r"\b(linfer_[a-zA-Z0-9_]+)")
RECORDED_RE = re.compile(r"\blinfer:[a-zA-Z0-9_:]+")


def check_expr(where, expr, metrics, hist, recorded=frozenset()):
    found = False
    for name in METRIC_RE.findall(expr):
        found = True
        if name not in metrics:
            err(where, f"unknown metric {name} in: {expr.strip()[:160]}")
        if name in hist:
            err(where, f"histogram {name} used without _bucket/_sum/_count")
    for name in RECORDED_RE.findall(expr):
        found = True
        if name not in recorded:
            err(where, f"unknown recording rule {name}")
    if "histogram_quantile" in expr:
        if "_bucket" not in expr or not re.search(r"\ble\b", expr):
            err(where, f"histogram_quantile needs a _bucket series aggregated by le: {expr[:160]}")
    if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
        err(where, f"unbalanced brackets: {expr[:160]}")
    return found


# ---------------------------------------------------------------------------------------------
def check_all_yaml_parses():
    paths = [p for p in glob.glob(os.path.join(DEPLOY, "**", "*.y*ml"), recursive=True)]
    for p in paths:
        load_yaml_docs(p)
    return len(paths)


def check_dockerfile():
    path = os.path.join(DEPLOY, "Dockerfile")
    text = open(path).read()
    where = rel(path)
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.M | re.I)
    if [s[1] for s in stages] != ["build", "runtime"]:
        err(where, f"expected stages build, runtime (runtime last = default target), got {stages}")
    for pattern, what in [
        (r"^ARG BASE_IMAGE=debian:bookworm-slim$", "ARG BASE_IMAGE=debian:bookworm-slim"),
        (r"^HEALTHCHECK\s", "HEALTHCHECK"),
        (r"^STOPSIGNAL SIGTERM$", "STOPSIGNAL SIGTERM"),
        (r"^EXPOSE 50051 8000$", "EXPOSE 50051 8000"),
        (r"^USER (?!0|root)\S+", "a non-root USER"),
        (r'^ENTRYPOINT \[.*"serve".*"--bind=0\.0\.0\.0"\]', "ENTRYPOINT linfer serve --bind=0.0.0.0"),
        (r"/usr/share/linfer/models/tiny", "the bundled model in /usr/share/linfer/models/tiny"),
        (r"ctest ", "ctest in the build stage"),
        (r"deploy/setup\.sh", "deploy/setup.sh for the build dependencies"),
        (r"LINFER_CUDA", "the CUDA variant argument"),
    ]:
        if not re.search(pattern, text, re.M):
            err(where, f"missing {what}")
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        if "$" not in src and src != "." and not os.path.exists(os.path.join(ROOT, src)):
            err(where, f"COPY source {src} does not exist")
    ignore = os.path.join(ROOT, ".dockerignore")
    if not os.path.exists(ignore):
        err(".dockerignore", "missing at the repository root")
    else:
        lines = {line.strip() for line in open(ignore)}
        for must in ("build", "build-*", "**/node_modules", ".git"):
            if must not in lines:
                err(".dockerignore", f"should exclude {must}")


def check_compose():
    path = os.path.join(DEPLOY, "docker-compose.yml")
    docs = load_yaml_docs(path)
    where = rel(path)
    if len(docs) != 1:
        err(where, "expected one YAML document")
        return
    c = docs[0]
    services = c.get("services", {})
    for s in ("linfer", "prometheus", "grafana"):
        if s not in services:
            err(where, f"missing service {s}")
    base = os.path.dirname(path)
    lin = services.get("linfer", {})
    build = lin.get("build", {})
    ctx = os.path.normpath(os.path.join(base, build.get("context", ".")))
    if not os.path.exists(os.path.join(ctx, build.get("dockerfile", "Dockerfile"))):
        err(where, "linfer build: Dockerfile not found from context")
    ports = " ".join(str(p) for p in lin.get("ports", []))
    for p in ("50051", "8000"):
        if p not in ports:
            err(where, f"linfer does not publish port {p}")
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            src = str(v).split(":")[0]
            if src.startswith("."):
                if not os.path.exists(os.path.normpath(os.path.join(base, src))):
                    err(where, f"{name}: volume source {src} does not exist")
            elif not src.startswith("/") and src not in (c.get("volumes") or {}):
                err(where, f"{name}: named volume {src} not declared")
        for dep in svc.get("depends_on", []):
            if dep not in services:
                err(where, f"{name}: depends_on unknown service {dep}")
    # Prometheus scrapes the linfer service on its HTTP port.
    prom = load_yaml_docs(os.path.join(DEPLOY, "prometheus", "prometheus.yml"))
    targets = [t for sc in (prom[0].get("scrape_configs", []) if prom else [])
               for st in sc.get("static_configs", []) for t in st.get("targets", [])]
    if "linfer:8000" not in targets:
        err("deploy/prometheus/prometheus.yml", "does not scrape linfer:8000")


def check_grafana(metrics, hist, recorded):
    gdir = os.path.join(DEPLOY, "grafana")
    ds_docs = load_yaml_docs(os.path.join(gdir, "provisioning", "datasources", "prometheus.yml"))
    uids = set()
    for d in ds_docs:
        for ds in d.get("datasources", []):
            require(ds, "grafana datasource", "name", "type", "url", "uid")
            if ds.get("type") != "prometheus":
                err("grafana datasource", f"type {ds.get('type')} is not prometheus")
            uids.add(ds.get("uid"))
    prov = load_yaml_docs(os.path.join(gdir, "provisioning", "dashboards", "linfer.yml"))
    if not prov or not get(prov[0], "providers"):
        err("grafana dashboard provider", "missing providers")
    dashboards = glob.glob(os.path.join(gdir, "dashboards", "*.json"))
    if not dashboards:
        err("deploy/grafana/dashboards", "no dashboard JSON")
    n_exprs = 0
    for path in dashboards:
        where = rel(path)
        try:
            dash = json.load(open(path))
        except json.JSONDecodeError as e:
            err(where, f"invalid JSON: {e}")
            continue
        require(dash, where, "uid", "title", "panels", "schemaVersion")
        tvars = {v.get("name"): v for v in get(dash, "templating.list", [])}
        ds_var = tvars.get("datasource")
        if ds_var is None or ds_var.get("query") != "prometheus":
            err(where, "needs a prometheus datasource variable named datasource")
        elif get(ds_var, "current.value") not in uids:
            err(where, f"default datasource {get(ds_var, 'current.value')} is not provisioned ({uids})")
        ids, titles = set(), []

        def panels(ps):
            for p in ps:
                yield p
                yield from panels(p.get("panels", []))

        for p in panels(dash.get("panels", [])):
            pw = f"{where} panel {p.get('id')} '{p.get('title')}'"
            if p.get("id") in ids:
                err(pw, "duplicate panel id")
            ids.add(p.get("id"))
            gp = p.get("gridPos", {})
            if not all(k in gp for k in ("h", "w", "x", "y")) or gp.get("x", 0) + gp.get("w", 0) > 24:
                err(pw, f"bad gridPos {gp}")
            if p.get("type") == "row":
                continue
            titles.append(p.get("title", ""))
            targets = p.get("targets", [])
            if not targets:
                err(pw, "no targets")
            for t in targets:
                expr = t.get("expr", "")
                if not expr:
                    err(pw, "target without expr")
                    continue
                n_exprs += 1
                if not check_expr(pw, expr, metrics, hist, recorded) and "up{" not in expr:
                    err(pw, f"expr uses no linfer metric: {expr}")
                for var in re.findall(r"\$(\w+)", expr):
                    if var not in tvars and not var.startswith("__"):
                        err(pw, f"unknown variable ${var}")
        # The panels the deployment issue asks for.
        text = " ".join(titles).lower()
        all_exprs = json.dumps(dash)
        for what, needle in [("throughput", "linfer_generation_tokens_total"),
                             ("TTFT percentiles", "linfer_time_to_first_token_seconds_bucket"),
                             ("inter-token percentiles", "linfer_inter_token_latency_seconds_bucket"),
                             ("queue", "linfer_requests_waiting"),
                             ("slots", "linfer_state_slots_used"),
                             ("sessions per tier", "by (tier)"),
                             ("errors", "linfer_request_errors_total")]:
            if needle not in all_exprs:
                err(where, f"no panel for {what} ({needle})")
        if not text:
            err(where, "no panels")
    return n_exprs


def check_rules(metrics, hist):
    path = os.path.join(DEPLOY, "prometheus", "alerts.yml")
    docs = load_yaml_docs(path)
    recorded, alerts = set(), set()
    for d in docs:
        for g in d.get("groups", []):
            for r in g.get("rules", []):
                if "record" in r:
                    recorded.add(r["record"])
                if "alert" in r:
                    alerts.add(r["alert"])
    for d in docs:
        for g in d.get("groups", []):
            for r in g.get("rules", []):
                name = r.get("record") or r.get("alert")
                check_expr(f"{rel(path)} {name}", r.get("expr", ""), metrics, hist, recorded)
                if "alert" in r and not get(r, "labels.severity"):
                    err(f"{rel(path)} {name}", "alert without a severity label")
    for want in ("LinferInstanceDown", "LinferQueueGrowing", "LinferSlotPoolFull",
                 "LinferHighErrorRatio"):
        if want not in alerts:
            err(rel(path), f"missing alert {want}")
    tests = load_yaml_docs(os.path.join(DEPLOY, "prometheus", "rules_test.yml"))
    tested = {t.get("alertname") for d in tests for case in d.get("tests", [])
              for t in case.get("alert_rule_test", [])}
    for a in alerts - tested:
        err("deploy/prometheus/rules_test.yml", f"alert {a} has no unit test")
    return recorded


# ---------------------------------------------------------------------------------------------
# Kubernetes
def k8s_docs():
    out = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "**", "*.yaml"), recursive=True)):
        if os.path.basename(path) in ("envoy.yaml", "values.yaml"):
            continue
        for d in load_yaml_docs(path):
            out.append((path, d))
    return out


def check_container(where, c, gpu=False):
    require(c, where, "name", "image")
    ports = {p.get("containerPort"): p.get("name") for p in c.get("ports", [])}
    if 50051 not in ports or 8000 not in ports:
        err(where, f"container ports must include 50051 and 8000 (got {sorted(ports)})")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if get(c, f"{probe}.grpc.port") != 50051:
            err(where, f"{probe} must be a gRPC probe on port 50051")
    for r in ("requests.cpu", "requests.memory", "limits.memory"):
        if get(c.get("resources", {}), r) is None:
            err(where, f"missing resources.{r}")
    if gpu:
        for r in ("requests", "limits"):
            if get(c, f"resources.{r}", {}).get("nvidia.com/gpu") is None:
                err(where, f"GPU variant needs resources.{r}.nvidia.com/gpu")
    args = " ".join(c.get("args", []))
    if "--bind=127.0.0.1" in args:
        err(where, "binds to loopback inside the pod: probes and Services cannot reach it")


def check_k8s():
    docs = k8s_docs()
    where_of = {}
    kinds = {}
    for path, d in docs:
        w = f"{rel(path)} {d.get('kind')}/{get(d, 'metadata.name')}"
        where_of[id(d)] = w
        if d.get("kind") == "Kustomization":
            require(d, w, "apiVersion")
            base = os.path.dirname(path)
            for r in d.get("resources", []):
                if not os.path.exists(os.path.join(base, r)):
                    err(w, f"resource {r} does not exist")
            for p in d.get("patches", []):
                if "path" in p and not os.path.exists(os.path.join(base, p["path"])):
                    err(w, f"patch {p['path']} does not exist")
            for g in d.get("configMapGenerator", []):
                for f in g.get("files", []):
                    if not os.path.exists(os.path.join(base, f.split("=")[-1])):
                        err(w, f"configMapGenerator file {f} does not exist")
            continue
        if not require(d, w, "apiVersion", "kind", "metadata.name"):
            continue
        kinds.setdefault(d["kind"], []).append((path, d))

    patch_paths = set()
    for path, d in docs:
        if d.get("kind") == "Kustomization":
            for p in d.get("patches", []):
                if "path" in p:
                    patch_paths.add(os.path.normpath(os.path.join(os.path.dirname(path), p["path"])))

    deployments = {}
    for path, d in kinds.get("Deployment", []):
        w = where_of[id(d)]
        is_patch = os.path.normpath(path) in patch_paths
        if is_patch:
            cs = get(d, "spec.template.spec.containers", [])
            gpu = any(get(c, "resources.limits", {}).get("nvidia.com/gpu") for c in cs)
            if "gpu" in path and not gpu:
                err(w, "GPU patch does not request nvidia.com/gpu")
            continue
        require(d, w, "spec.selector.matchLabels", "spec.template.metadata.labels",
                "spec.template.spec.containers")
        sel = get(d, "spec.selector.matchLabels", {})
        labels = get(d, "spec.template.metadata.labels", {})
        if any(labels.get(k) != v for k, v in sel.items()):
            err(w, "selector does not match the pod template labels")
        deployments[get(d, "metadata.name")] = d
        if get(d, "metadata.name") == "linfer":
            ann = get(d, "spec.template.metadata.annotations", {})
            if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "8000":
                err(w, "pod template needs prometheus.io/scrape=true and prometheus.io/port=8000")
            if not get(d, "spec.template.spec.securityContext.runAsNonRoot"):
                err(w, "pod should set runAsNonRoot")
            grace = get(d, "spec.template.spec.terminationGracePeriodSeconds", 30)
            cs = get(d, "spec.template.spec.containers", [])
            for c in cs:
                check_container(f"{w} container {c.get('name')}", c)
                m = re.search(r"--drain_timeout_s=(\d+)", " ".join(c.get("args", [])))
                if m and grace <= int(m.group(1)):
                    err(w, f"terminationGracePeriodSeconds {grace} <= --drain_timeout_s {m.group(1)}")
    if "linfer" not in deployments:
        err("deploy/k8s", "no Deployment named linfer")

    def pod_labels(name):
        return get(deployments.get(name, {}), "spec.template.metadata.labels", {})

    services = {}
    for path, d in kinds.get("Service", []):
        w = where_of[id(d)]
        services[get(d, "metadata.name")] = d
        sel = get(d, "spec.selector", {})
        target = next((n for n in deployments if all(pod_labels(n).get(k) == v for k, v in sel.items())), None)
        if not sel or target is None:
            err(w, f"selector {sel} matches no Deployment's pods")
            continue
        cports = {p.get("name") for c in get(deployments[target], "spec.template.spec.containers", [])
                  for p in c.get("ports", [])}
        cnums = {p.get("containerPort") for c in get(deployments[target], "spec.template.spec.containers", [])
                 for p in c.get("ports", [])}
        for p in get(d, "spec.ports", []):
            tp = p.get("targetPort", p.get("port"))
            if tp not in cports and tp not in cnums:
                err(w, f"targetPort {tp} is not a container port of {target}")
    for want in ("linfer", "linfer-headless"):
        if want not in services:
            err("deploy/k8s", f"no Service {want}")
    if "linfer-headless" in services and get(services["linfer-headless"], "spec.clusterIP") != "None":
        err("deploy/k8s", "linfer-headless must be headless (clusterIP: None)")

    hpas = kinds.get("HorizontalPodAutoscaler", [])
    if not hpas:
        err("deploy/k8s", "no HorizontalPodAutoscaler")
    for path, d in hpas:
        w = where_of[id(d)]
        if d.get("apiVersion") != "autoscaling/v2":
            err(w, "use autoscaling/v2")
        ref = get(d, "spec.scaleTargetRef", {})
        if ref.get("kind") != "Deployment" or ref.get("name") not in deployments:
            err(w, f"scaleTargetRef {ref} is not one of the Deployments")
        names = [get(m, "pods.metric.name") for m in get(d, "spec.metrics", [])]
        if "linfer_requests_waiting" not in names:
            err(w, "does not scale on linfer_requests_waiting")
        if get(d, "spec.minReplicas", 1) > get(d, "spec.maxReplicas", 0):
            err(w, "minReplicas > maxReplicas")

    # prometheus-adapter rules expose what the HPA asks for.
    vpath = os.path.join(DEPLOY, "k8s", "prometheus-adapter", "values.yaml")
    values = load_yaml_docs(vpath)
    exposed = set()
    for v in values:
        for r in get(v, "rules.custom", []):
            w = f"{rel(vpath)} rule {r.get('seriesQuery')}"
            require(r, w, "seriesQuery", "resources", "name.as", "metricsQuery")
            exposed.add(get(r, "name.as"))
            if "<<.Series>>" not in r.get("metricsQuery", "") or "<<.LabelMatchers>>" not in r.get("metricsQuery", ""):
                err(w, "metricsQuery must use <<.Series>> and <<.LabelMatchers>>")
            check_expr(w, r.get("seriesQuery", ""), METRICS, HIST)
    for path, d in hpas:
        for m in get(d, "spec.metrics", []):
            n = get(m, "pods.metric.name")
            if n and n not in exposed:
                err(where_of[id(d)], f"metric {n} is not exposed by the prometheus-adapter rules")


def check_envoy():
    path = os.path.join(DEPLOY, "k8s", "envoy", "envoy.yaml")
    docs = load_yaml_docs(path)
    where = rel(path)
    if len(docs) != 1:
        err(where, "expected one document")
        return
    cfg = docs[0]
    clusters = {c.get("name"): c for c in get(cfg, "static_resources.clusters", [])}
    listeners = get(cfg, "static_resources.listeners", [])
    if not listeners:
        err(where, "no listeners")
    hashed = False
    for li in listeners:
        for fc in li.get("filter_chains", []):
            for f in fc.get("filters", []):
                tc = f.get("typed_config", {})
                if not tc.get("@type", "").startswith("type.googleapis.com/envoy."):
                    err(where, f"filter {f.get('name')} without a v3 @type")
                filters = [h.get("name") for h in tc.get("http_filters", [])]
                if filters and filters[-1] != "envoy.filters.http.router":
                    err(where, "the router must be the last HTTP filter")
                for vh in get(tc, "route_config.virtual_hosts", []):
                    for r in vh.get("routes", []):
                        cl = get(r, "route.cluster")
                        if cl not in clusters:
                            err(where, f"route to unknown cluster {cl}")
                        for hp in get(r, "route.hash_policy", []):
                            if get(hp, "header.header_name") == "x-session-id":
                                hashed = True
    if not hashed:
        err(where, "no route hashes on the x-session-id header")
    for name, c in clusters.items():
        if c.get("lb_policy") != "RING_HASH":
            err(where, f"cluster {name}: lb_policy must be RING_HASH for session affinity")
        eps = [get(e, "endpoint.address.socket_address") for le in get(c, "load_assignment.endpoints", [])
               for e in le.get("lb_endpoints", [])]
        if name.endswith("_http"):  # the OpenAI HTTP API
            if not eps or any(get(e or {}, "port_value") != 8000 for e in eps):
                err(where, f"cluster {name}: endpoints must be linfer's HTTP port 8000")
            if not any(get(h, "http_health_check.path") == "/health" for h in c.get("health_checks", [])):
                err(where, f"cluster {name}: needs an HTTP health check on /health")
            continue
        if get(c, "typed_extension_protocol_options") is None and get(c, "http2_protocol_options") is None:
            err(where, f"cluster {name}: gRPC upstreams need HTTP/2")
        if not eps or any(get(e or {}, "port_value") != 50051 for e in eps):
            err(where, f"cluster {name}: endpoints must be linfer's gRPC port 50051")


def main():
    global ROOT, DEPLOY, METRICS, HIST
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ROOT = os.path.abspath(sys.argv[1])
    DEPLOY = os.path.join(ROOT, "deploy")
    METRICS, HIST = known_metrics()
    n_yaml = check_all_yaml_parses()
    check_dockerfile()
    check_compose()
    recorded = check_rules(METRICS, HIST)
    n_exprs = check_grafana(METRICS, HIST, recorded)
    check_k8s()
    check_envoy()
    if errors:
        print(f"validate_manifests: {len(errors)} problem(s):")
        for e in errors:
            print("  " + e)
        return 1
    print(f"validate_manifests: OK ({n_yaml} YAML files, {n_exprs} dashboard queries, "
          f"{len(METRICS)} known linfer_ series names)")
    return 0


ROOT = DEPLOY = ""
METRICS, HIST = set(), set()
if __name__ == "__main__":
    sys.exit(main())
