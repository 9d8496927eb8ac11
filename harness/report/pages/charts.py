"""Throughput against peak memory, one chart per workload, drawn by matplotlib as inline SVG
(the pages then need no script and work offline). Points on an environment's Pareto frontier are
filled and joined; the others are hollow. Every text comes from records, so none is parsed as
mathtext ("$" and "\\" stay what they are) and TeX is never used."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display on build machines
import matplotlib.pyplot as plt  # noqa: E402

# Text stays text in the SVG (searchable, small); no date, so rebuilt pages do not differ.
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "oombench", "font.size": 9, "text.usetex": False})
PLAIN = {"parse_math": False}


def pareto_svg(series: list[dict], x_label: str, y_label: str, title: str) -> str:
    """series: [{"label": environment, "points": [(x, y, text, on_frontier), ...]}, ...]"""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, s in enumerate(series):
        color = f"C{i % 10}"
        pts = sorted(s["points"])
        front = [(x, y) for x, y, _, on in pts if on]
        if front:
            ax.plot(*zip(*front), color=color, linewidth=1, drawstyle="steps-post", alpha=0.6)
        for x, y, text, on in pts:
            ax.scatter([x], [y], s=36, color=color if on else "white", edgecolors=color, zorder=3)
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color="#333", **PLAIN)
        ax.scatter([], [], color=color, label=s["label"])
    ax.set_xlabel(x_label, **PLAIN)
    ax.set_ylabel(y_label, **PLAIN)
    ax.set_title(title, fontsize=9, **PLAIN)
    ax.grid(True, alpha=0.3)
    for text in ax.legend(fontsize=7, loc="best").get_texts():
        text.set_parse_math(False)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prologue: the SVG is inlined in HTML
