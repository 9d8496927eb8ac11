"""Throughput against peak memory, one chart per workload and GPU, drawn by matplotlib as inline
SVG (the pages then need no script and work offline). Each technique has its own colour and
marker, keyed in a legend outside the axes, so no label is printed over another; points on the
Pareto frontier are filled and joined, the others hollow. Every text comes from records, so none
is parsed as mathtext ("$" and "\\" stay what they are) and TeX is never used."""
from __future__ import annotations

import io
import os
import textwrap
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import partial

import matplotlib

matplotlib.use("Agg")  # no display on build machines
import matplotlib.pyplot as plt  # noqa: E402

# Text stays text in the SVG (searchable, small); no date, so rebuilt pages do not differ.
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "oombench", "font.size": 9, "text.usetex": False})
PLAIN = {"parse_math": False}
MARKERS = "osD^vP*X<>ph"


def style(i: int) -> dict:
    """Twenty colours and eleven markers: two techniques of one chart never look alike."""
    return {"color": plt.get_cmap("tab20")(i % 20), "marker": MARKERS[i % len(MARKERS)]}


def pareto_svg(points: list[tuple], x_label: str, y_label: str, title: str) -> str:
    """points: [(peak GB, rate, technique, on_frontier), ...], one per technique."""
    fig, ax = plt.subplots(figsize=(4.4, 3.2))  # with its legend, under half of a page 1400 px wide: two a row
    front = sorted((x, y) for x, y, _, on in points if on)
    if front:
        ax.plot(*zip(*front), color="#888", linewidth=1, drawstyle="steps-post", zorder=2)
    for i, (x, y, text, on) in enumerate(points):
        st = style(i)
        ax.scatter([x], [y], s=40, marker=st["marker"], edgecolors=st["color"], linewidths=1.3,
                   facecolors=st["color"] if on else "none", zorder=3, label="\n".join(textwrap.wrap(text, 30)) or text)
    ax.set_xlabel(x_label, **PLAIN)
    ax.set_ylabel(y_label, **PLAIN)
    # A long title reaches left over the y ticks: its pad clears half a tick label at the axes' top.
    ax.set_title("\n".join(textwrap.wrap(title, 56)), fontsize=9, pad=12, **PLAIN)
    ax.grid(True, alpha=0.3)
    ax.locator_params(axis="x", nbins=4)  # on a narrow axis, long tick labels would touch
    # Rates close together would be ticked as an offset ("+1.372e2") printed above the axes, over
    # the title: each tick is written whole instead.
    ax.ticklabel_format(style="plain", useOffset=False)
    legend = ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
                       ncol=1 if len(points) <= 14 else 2)
    for text in legend.get_texts():
        text.set_parse_math(False)
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None}, bbox_inches="tight")  # the legend inside the image
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prologue: the SVG is inlined in HTML


def _draw(*args) -> str:
    return pareto_svg(*args)  # looked up when called, in the worker: a stand-in a test puts in place is used


@contextmanager
def drawing(cpus: int | None = None):
    """``draw(points, x_label, y_label, title)``, giving a callable that returns that chart's SVG.
    With several CPUs the charts are drawn beside the build in worker processes, one a CPU: each
    chart stands alone, and matplotlib draws one at a time in a process. With one CPU each is
    drawn when it is read."""
    cpus = cpus or len(os.sched_getaffinity(0))
    if cpus < 2:
        yield lambda *args: partial(_draw, *args)
        return
    with ProcessPoolExecutor(cpus) as pool:
        yield lambda *args: pool.submit(_draw, *args).result
