"""Renders linfer_bench CSV results as PNG (Debian's python3-matplotlib, Agg backend).

  plot.py sweep CONCURRENCY.csv OUT_PREFIX [--title T]   throughput and TTFT/ITL percentiles
                                                          vs. max concurrency (or request rate)
  plot.py turns TURNS.csv OUT.png [--title T]            per-turn TTFT, sessions vs. full history
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 90


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else float("nan")


def x_axis(rows):
    if all(r.get("max_concurrency") for r in rows) and len({r["max_concurrency"] for r in rows}) > 1:
        return "max_concurrency", "max concurrency (requests in flight)"
    return "request_rate", "request rate (req/s)"


def plot_sweep(path, prefix, title):
    rows = read(path)
    key, label = x_axis(rows)
    x = [num(r, key) for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(x, [num(r, "output_throughput") for r in rows], "o-", label="output tok/s")
    ax.plot(x, [num(r, "total_token_throughput") for r in rows], "s-", label="total (in+out) tok/s")
    ax.set_xlabel(label)
    ax.set_ylabel("tokens / s")
    ax2 = ax.twinx()
    ax2.plot(x, [num(r, "request_throughput") for r in rows], "^--", color="gray", label="req/s")
    ax2.set_ylabel("requests / s")
    if key == "max_concurrency":
        ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower right", fontsize=8)
    ax.set_title(f"{title}: throughput")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{prefix}_throughput.png", dpi=DPI)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8))
    for ax, metric, name in [(axes[0], "ttft", "TTFT"), (axes[1], "itl", "ITL")]:
        for stat, style in [("median", "o-"), ("p90", "s--"), ("p99", "^:")]:
            ax.plot(x, [num(r, f"{stat}_{metric}_ms") for r in rows], style, label=stat)
        ax.set_xlabel(label)
        ax.set_ylabel(f"{name} (ms)")
        if key == "max_concurrency":
            ax.set_xscale("log", base=2)
        if metric == "itl":
            ax.set_yscale("log")  # decode stalls behind a prefill step sit far above the median
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(f"{name} percentiles vs. load")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(f"{prefix}_latency.png", dpi=DPI)
    plt.close(fig)


def plot_turns(path, out, title):
    rows = read(path)
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8))
    names = {"sessions": "persistent session (new turn only)",
             "history": "no session (full history resent)"}
    for mode, style in [("history", "s-"), ("sessions", "o-")]:
        sel = [r for r in rows if r["mode"] == mode]
        if not sel:
            continue
        turn = [int(r["turn"]) for r in sel]
        axes[0].plot(turn, [num(r, "mean_ttft_ms") for r in sel], style, label=names[mode])
        lo = [num(r, "median_ttft_ms") for r in sel]
        hi = [num(r, "p90_ttft_ms") for r in sel]
        axes[0].fill_between(turn, lo, hi, alpha=0.15)
        axes[1].plot(turn, [num(r, "mean_prompt_tokens") for r in sel], style, label=names[mode])
    axes[0].set_title("TTFT per turn (mean; band: median..p90)")
    axes[0].set_xlabel("turn")
    axes[0].set_ylabel("TTFT (ms)")
    axes[1].set_title("prompt tokens sent per turn")
    axes[1].set_xlabel("turn")
    axes[1].set_ylabel("tokens")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("kind", choices=["sweep", "turns"])
    p.add_argument("csv")
    p.add_argument("out")
    p.add_argument("--title", default="linfer")
    a = p.parse_args()
    if a.kind == "sweep":
        plot_sweep(a.csv, a.out, a.title)
    else:
        plot_turns(a.csv, a.out, a.title)


if __name__ == "__main__":
    main()
