#!/usr/bin/env python3
"""Draws the cost curves of docs/BENCHMARKS.md as SVG files from the JSON lines that `kickoff bench`
(pages, recovery, streams) and scripts/bench-api print. Run by scripts/bench-curves; by hand:

    scripts/plot-curves.py docs/benchmarks/curves.jsonl docs/benchmarks/

Needs matplotlib (scripts/bench-curves installs it in a virtual environment of its own).
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.figsize": (6.4, 3.6)})

# The dashboard addresses drawn, by how they start (all are in the tables; these show the
# spread; the due-time window's address carries the run's own times).
PAGES = ["/", "/jobs", "/jobs?state=scheduled", "/jobs?kind=", "/jobs?args=", "/jobs?from=",
         "/failures", "/timers", "/api/v1/jobs"]


def lines(path):
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)


def save(fig, out, name):
    fig.tight_layout()
    fig.savefig(out / name, metadata={"Date": None})
    plt.close(fig)
    print(out / name)


def label(ax, xlabel, ylabel, title, legend=8, ylog=False):
    """The axes' words; every curve's x axis is logarithmic (sizes a decade apart)."""
    ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=legend)


def target(ax, y, label):
    ax.axhline(y, color="#b00", linestyle="--", linewidth=0.8)
    ax.annotate(label, (0.99, y), xycoords=("axes fraction", "data"), color="#b00",
                fontsize=8, va="bottom", ha="right")


def pages(runs, out):
    runs = sorted(runs, key=lambda r: r["jobs"])
    xs = [r["jobs"] for r in runs]
    fig, ax = plt.subplots()
    for start in PAGES:
        def p95(r):
            exact = r["addresses"].get(start)
            if exact is None and start.endswith("="):
                exact = next((v for k, v in r["addresses"].items() if k.startswith(start)), None)
            return exact and exact["p95_ms"]
        ys = [p95(r) for r in runs]
        if any(y is not None for y in ys):
            name = start + "…" if start.endswith("=") else start
            ax.plot(xs, ys, marker="o", label=name)
    worst = [max(a["p95_ms"] for a in r["addresses"].values()) for r in runs]
    ax.plot(xs, worst, marker="s", color="black", linewidth=1.5, label="worst of all addresses")
    target(ax, 20, "target at 10 M: 20 ms")
    label(ax, "jobs in the table", "p95 of a whole response (ms)", "Dashboard pages and API lists",
          legend=7)
    save(fig, out, "pages-p95.svg")

    fig, ax = plt.subplots()
    ax.plot(xs, [r["jobs_table_mib"] for r in runs], marker="o", label="jobs table (MiB)")
    ax.plot(xs, [r["jobs_indexes_mib"] for r in runs], marker="o", label="its indexes (MiB)")
    ax.plot(xs, [r["server_rss_mib"] for r in runs], marker="o", label="server RSS (MiB)")
    label(ax, "jobs in the table", "MiB", "Size on disk and server memory", ylog=True)
    save(fig, out, "pages-size.svg")

    fig, ax = plt.subplots()
    ax.plot(xs, [r["pruned"] / r["prune_secs"] if r["prune_secs"] else 0 for r in runs],
            marker="o")
    label(ax, "jobs in the table", "finished jobs pruned per second",
          "Pruning rate (batches of 10,000)", legend=0)
    ax.set_ylim(bottom=0)
    save(fig, out, "prune-rate.svg")


def recovery(runs, out):
    fig, ax = plt.subplots()
    by_c = {}
    for r in runs:
        by_c.setdefault(r["concurrency"], []).append(r)
    for c, rs in sorted(by_c.items()):
        rs.sort(key=lambda r: r["overdue_jobs"])
        ax.plot([r["overdue_jobs"] for r in rs], [r["all_completed_s"] for r in rs], marker="o",
                label=f"concurrency {c}")
    target(ax, 10, "target at 100,000: 10 s")
    label(ax, "jobs overdue when the node starts", "until all are done (s)", "Recovery")
    save(fig, out, "recovery.svg")


def streams(result, out):
    runs = sorted(result["runs"], key=lambda r: r["streams"])
    xs = [r["streams"] for r in runs]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(8, 3.4))
    ax.plot(xs, [r["delivery_p50_ms"] for r in runs], marker="o", label="one stream, p50")
    ax.plot(xs, [r["delivery_p99_ms"] for r in runs], marker="o", label="one stream, p99")
    ax.plot(xs, [r["all_streams_p99_ms"] for r in runs], marker="s",
            label="until every stream had it, p99")
    label(ax, "open streams on one node", "ms after the change was sent",
          "Delivery of one change", legend=7)
    ax2.plot(xs, [r["server_rss_mib"] for r in runs], marker="o", label="server RSS (MiB)")
    ax2.plot(xs, [r["server_cpu_idle_pct"] for r in runs], marker="o",
             label="server CPU, idle (% of a core)")
    ax2.plot(xs, [r["server_cpu_delivering_pct"] for r in runs], marker="o",
             label="server CPU, delivering (%)")
    label(ax2, "open streams on one node", None, "What holding them costs", legend=7)
    save(fig, out, "streams.svg")


def api(runs, out):
    runs = sorted(runs, key=lambda r: r["connections"])
    xs = [r["connections"] for r in runs]
    fig, ax = plt.subplots()
    ax.plot(xs, [r["per_second"] for r in runs], marker="o", color="C0", label="inserts/s")
    target(ax, 5000, "target: 5,000 inserts/s")
    label(ax, "concurrent clients (wrk connections)", None, "POST /api/v1/jobs over HTTP",
          legend=0)
    ax.set_ylabel("inserts/s", color="C0")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.plot(xs, [r["p99_ms"] for r in runs], marker="s", color="C1", label="p99 (ms)")
    ax2.set_ylabel("p99 ms", color="C1")
    ax2.set_ylim(bottom=0)
    save(fig, out, "api-insert.svg")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rows = list(lines(sys.argv[1]))
    page_runs = [r for r in rows if r.get("workload") == "pages"]
    recovery_runs = [r for r in rows if r.get("bench") == "recovery"]
    stream_runs = [r for r in rows if r.get("bench") == "streams"]
    api_runs = [r for r in rows if r.get("bench") == "api_insert"]
    if page_runs:
        pages(page_runs, out)
    if recovery_runs:
        recovery(recovery_runs, out)
    if stream_runs:
        streams(stream_runs[-1], out)
    if api_runs:
        api(api_runs, out)


if __name__ == "__main__":
    main()
