"""A PNG of the results a person can look at: four panels, one per measurement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from bench import targets


def _throughput(ax: Axes, rows: list[dict[str, Any]]) -> None:
    names = [r["system"] for r in rows]
    values = [r.get("runs_per_second") or 0.0 for r in rows]
    bars = ax.bar(names, values, color=["tab:blue", "tab:cyan", "tab:gray"][: len(rows)])
    for bar, row in zip(bars, rows, strict=True):
        ratio = f" ({row['celery_ratio']:.2f}x)" if row.get("celery_ratio") else ""
        label = f"{row['runs_per_second']:.0f}{ratio}" if row.get("runs_per_second") else "n/a"
        if row.get("cpu_ms_per_run") is not None:
            label += f"\n{row['cpu_ms_per_run']:.1f} ms CPU/run"
        x = bar.get_x() + bar.get_width() / 2
        ax.annotate(label, (x, bar.get_height()), ha="center", va="bottom", fontsize=9)
    ax.margins(y=0.2)  # room for the two-line labels
    ax.set_title("Throughput: runs/s, one worker process")
    ax.set_ylabel("runs per second")


def _cost(ax: Axes, rows: list[dict[str, Any]]) -> None:
    names = [r["scenario"] for r in rows]
    series = (
        ("DynamoDB writes", "dynamodb_writes"),
        ("DynamoDB reads", "dynamodb_reads"),
        ("SQS requests", "sqs_requests"),
    )
    width = 0.27
    for i, (label, key) in enumerate(series):
        xs = [n + (i - 1) * width for n in range(len(rows))]
        ax.bar(xs, [r["per_run"][key] for r in rows], width, label=label)
    labels = [
        f"{name}\n${r['usd_per_million_runs']:.2f} / M runs"
        for name, r in zip(names, rows, strict=True)
    ]
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("requests per run")
    ax.set_title("Cost per run by scenario (on-demand $ per million runs)")
    ax.legend(fontsize=8)


def _maintenance(ax: Axes, rows: list[dict[str, Any]]) -> None:
    measured = [r for r in rows if r["status"] == "ok"]
    sizes = [r["table_runs"] for r in measured]
    ax.plot(sizes, [r["items_read"] for r in measured], "o-", label="items read")
    ax.plot(sizes, [sum(r["requests"].values()) for r in measured], "s--", label="requests")
    limit = targets.MAINTENANCE_ITEMS_PER_DUE * 10
    ax.axhline(limit, color="red", lw=0.8, label="target: items read <= 2 per due run")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("runs in the table (10 due)")
    ax.set_title("One maintenance pass")
    ax.legend(fontsize=8)


def _latency(ax: Axes, rows: list[dict[str, Any]]) -> None:
    data = [r["samples_ms"] for r in rows]
    ax.boxplot(data, tick_labels=[r["name"] for r in rows], whis=(5, 95))
    ax.axhline(targets.TRIGGER_TO_START_P50_MS, color="orange", lw=0.8, label="p50 target")
    ax.axhline(targets.TOKEN_TO_RESUME_P95_MS, color="red", lw=0.8, label="p95 target")
    ax.set_yscale("log")
    ax.set_ylabel("ms")
    ax.set_title("Latency, idle worker (whiskers p5-p95)")
    ax.legend(fontsize=8)


def write_chart(path: Path, results: dict[str, Any]) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    panels = (
        (axes[0][0], "throughput", _throughput),
        (axes[0][1], "cost", _cost),
        (axes[1][0], "maintenance", _maintenance),
        (axes[1][1], "latency", _latency),
    )
    for ax, key, draw in panels:
        if results.get(key):
            draw(ax, results[key])
        else:
            ax.set_title(f"{key}: not measured")
            ax.axis("off")
    fig.suptitle(
        f"runlane-sqs benchmark on {results['backend']} ({results['started_at']})"
        + (" - smoke sizes" if results.get("smoke") else "")
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
