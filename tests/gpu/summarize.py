"""Results table of a GPU run: linfer's CUDA benchmark (Google Benchmark JSON) next to fla's.

    python3 tests/gpu/summarize.py OUT_DIR   # reads OUT_DIR/bench.json and OUT_DIR/fla.json (either
                                             # may be missing), writes OUT_DIR/summary.md, prints it
The kernel variants' reruns (sections "== LINFER_CUDA_…=…" that run_on_gpu.sh appends to
OUT_DIR/bench.log) get a table of their cold times against the default run's: which opt-in wins.
"""

import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def linfer_rows(bench):
    """{(kind, layer, variant, size, temp): record} from Google Benchmark's JSON."""
    rows = {}
    for b in (bench or {}).get("benchmarks", []):
        name = b.get("run_name", b["name"])
        m = re.match(r"Decode/([^/]+)/([^/]+)/(cold|warm)/batch:(\d+)", name)
        if m:
            rows[("decode", m[1], m[2], m[4], m[3])] = b
            continue
        m = re.match(r"Prefill/([^/]+)/(\d+x\d+)/(cold|warm)", name)
        if m:
            rows[("prefill", m[1], "f32", m[2], m[3])] = b
    return rows


def fla_rows(fla):
    rows = {}
    for r in (fla or {}).get("runs", []):
        if "error" in r:
            continue
        size = str(r["batch"]) if r["kind"] == "decode" else r["shape"]
        rows[(r["kind"], r["layer"], r["inputs"], size, r["temp"])] = r
    return rows


# A Google Benchmark console line: name, real time and its unit.
CONSOLE = re.compile(r"^((?:Decode|Prefill|Attention|Linear)/\S+?)(?:/iterations:\d+)?(?:/manual_time)?"
                     r"\s+([\d.]+) (ns|us|ms|s)\s")


def variant_rows(log_path):
    """{section: {benchmark: seconds}} from bench.log; section "" is the default run."""
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    sections, current = {"": {}}, ""
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if line.startswith("== "):
                    current = line[3:].strip()
                    sections.setdefault(current, {})
                    continue
                m = CONSOLE.match(line)
                if m and "/cold" in m[1]:
                    sections[current][m[1]] = float(m[2]) * units[m[3]]
    except OSError:
        return {}
    return {k: v for k, v in sections.items() if v and not k.startswith("fla")}


def variant_lines(log_path):
    """A table per opt-in section: its cold times against the default run's."""
    rows = variant_rows(log_path)
    base = rows.get("", {})
    lines = []
    for section, times in rows.items():
        if not section or not base:
            continue
        lines += ["", f"## {section} (cold, against the default run)", "",
                  "| benchmark | default | this variant | default / variant |", "|---|---|---|---|"]
        for name, t in sorted(times.items()):
            b = base.get(name)
            lines.append(f"| {name} | {fmt(b and b * 1e3, '.3f')} ms | {t * 1e3:.3f} ms | "
                         f"{fmt(b / t if b else None, '.2f')} |")
    return lines


def seconds(b):
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * unit


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    bench, fla = load(os.path.join(out, "bench.json")), load(os.path.join(out, "fla.json"))
    ours, theirs = linfer_rows(bench), fla_rows(fla)
    lines = ["# linfer CUDA kernels on " + ((bench or {}).get("context", {}).get("device")
                                         or (fla or {}).get("device") or "?"), ""]
    if bench:
        lines.append(f"Device-to-device copy (read + write): "
                     f"{float(bench['context'].get('copy_GBps', 0)):.0f} GB/s (linfer's probe)")
    if fla:
        lines.append(f"fla {fla.get('fla_version')} with torch {fla.get('torch')}; copy "
                     f"{fla.get('copy_GBps', 0):.0f} GB/s (torch's probe)")
    lines += ["", "## Decode step (one token per sequence; state read + written once)", "",
              "| layer | state | batch | cold µs | state GB/s | vs copy | warm µs | fla bf16 cold µs "
              "| fla f32 cold µs | speed-up vs fla (best) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in ours if k[0] == "decode" and k[4] == "cold"):
        _, layer, dtype, batch, _ = key
        b, warm = ours[key], ours.get(key[:4] + ("warm",))
        fb = theirs.get(("decode", layer, "bfloat16", batch, "cold"))
        ff = theirs.get(("decode", layer, "float32", batch, "cold"))
        best = min([r["us"] for r in (fb, ff) if r] or [None]) if (fb or ff) else None
        us = seconds(b) * 1e6
        lines.append(
            f"| {layer} | {dtype} | {batch} | {us:.1f} | {b.get('state_GBps', 0):.0f} | "
            f"{b.get('vs_copy', 0):.2f} | {fmt(seconds(warm) * 1e6 if warm else None, '.1f')} | "
            f"{fmt(fb and fb['us'], '.1f')} | {fmt(ff and ff['us'], '.1f')} | "
            f"{fmt(best / us if best else None, '.2f')} |")
    lines += ["", "## Chunked prefill (from zero states)", "",
              "| layer | tokens | cold ms | tokens/s | TFLOP/s (FlashInfer conv.) | warm ms | "
              "fla bf16 cold ms | fla f32 cold ms | speed-up vs fla (best) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in ours if k[0] == "prefill" and k[4] == "cold"):
        _, layer, _, shape, _ = key
        b, warm = ours[key], ours.get(key[:4] + ("warm",))
        fb = theirs.get(("prefill", layer, "bfloat16", shape, "cold"))
        ff = theirs.get(("prefill", layer, "float32", shape, "cold"))
        best = min(r["ms"] for r in (fb, ff) if r) if (fb or ff) else None
        ms = seconds(b) * 1e3
        lines.append(
            f"| {layer} | {shape} | {ms:.3f} | {b.get('tokens_per_s', 0) / 1e6:.1f} M | "
            f"{b.get('TFLOPs_fi', 0):.1f} | {fmt(seconds(warm) * 1e3 if warm else None, '.3f')} | "
            f"{fmt(fb and fb['ms'], '.3f')} | {fmt(ff and ff['ms'], '.3f')} | "
            f"{fmt(best / ms if best else None, '.2f')} |")
    lines += variant_lines(os.path.join(out, "bench.log"))
    errors = [r for r in (fla or {}).get("runs", []) if "error" in r]
    if errors:
        lines += ["", "fla runs that failed:"] + [f"- {json.dumps(r)}" for r in errors]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
