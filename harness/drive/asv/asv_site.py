"""asv's own site (history across commits), made to work offline.

asv 0.6.6's pages load jQuery, flot, bootstrap and two small plugins from CDNs; a published site
opened without internet (or on a CI box) would show nothing. After ``asv publish`` this copies the
vendored files beside the pages and points every CDN address at them.

asv publishes from a copy of the results whose labels are short (``asv_labels``), so that its
legends and selectors say "H200 x2" and "numpy-1.26.4", not the whole machine description.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.drive.asv.asv_labels import labelled_copy
from harness.drive.asv.asvconf import private_config
from harness.drive.scratch import private_dir
from harness.measure.guards import lifeline
from harness.measure.guards.owned import pid_alive

ASV = (sys.executable, "-m", "asv")  # asv's command line, run as this interpreter's module
VENDOR = Path(__file__).parent / "asv_vendor"
LEGEND_CSS = Path(__file__).parent / "asv_legend.css"  # keeps the graph's legend beside the plot, off the data
VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'  # as the comparison pages set it
# CDN address in asv's pages -> file under asv_vendor/ (copied to <site>/vendor/)
CDN = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "flot/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "flot/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": "flot/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": "flot/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "flot/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap/js/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap/css/bootstrap.min.css",
}


def localize(site: Path) -> list[str]:
    """Point the site's CDN addresses at local copies, and add oombench's legend style after
    asv's own; returns the addresses still remote."""
    shutil.copytree(VENDOR, site / "vendor", dirs_exist_ok=True)
    shutil.copyfile(LEGEND_CSS, site / LEGEND_CSS.name)
    for page in site.glob("*.html"):
        text = page.read_text()
        for url, local in CDN.items():
            text = text.replace(url, f"vendor/{local}")
        text = text.replace("</head>", f'<link rel="stylesheet" href="{LEGEND_CSS.name}">\n</head>', 1)
        if 'name="viewport"' not in text:  # asv's pages set none: a phone would lay them out 980 px wide
            text = text.replace("</head>", f"{VIEWPORT}\n</head>", 1)
        # The CDN tags carry subresource-integrity hashes of the minified CDN files; flot's local
        # copy is the unminified source, and a local file needs no integrity check: drop them.
        text = re.sub(r'(<(?:script|link)\b[^>]*"vendor/[^>]*>)',
                      lambda m: re.sub(r'\s(integrity|crossorigin)="[^"]*"', "", m.group(1)), text)
        page.write_text(text)
    return sorted({url for page in site.glob("*.html") for url in CDN if url in page.read_text()}
                  | {w for page in site.glob("*.html") for w in page.read_text().split('"')
                     if w.startswith(("https://cdn", "https://code."))})


def fill_missing_summaries(site: Path) -> None:
    """asv's pages ask for a summary graph of every benchmark, and asv writes none for a benchmark
    that no published result holds (GPU cases in CPU-only results, results of an older benchmark
    version): an empty one says "no data" without a 404."""
    index = json.loads((site / "index.json").read_text())
    summary = site / "graphs" / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    for name in index.get("benchmarks", {}):
        path = summary / f"{name}.json"
        if not path.exists():
            path.write_text("[]")


def _old(site: Path, pid: int) -> Path:
    return site.with_name(f".{site.name}.old-{pid}")


def sweep_old(site: Path) -> list[Path]:
    """Removes the old sites a publish killed mid-swap left beside ``site`` (named for its pid,
    which is gone); returns them."""
    gone = []
    for path in site.parent.glob(f".{site.name}.old-*"):
        pid = path.name.rpartition("-")[2]
        if pid.isdigit() and _old(site, int(pid)) == path and not path.is_symlink() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def swap_in(built: Path, site: Path) -> None:
    """``built`` becomes ``site`` (asv's own publish removes its folder whole, too): a reader or
    another publish sees the old site or the new one, never one half written."""
    old = _old(site, os.getpid())
    sweep_old(site)
    shutil.rmtree(old, ignore_errors=True)
    if site.exists():
        site.rename(old)
    built.rename(site)
    shutil.rmtree(old, ignore_errors=True)


def publish(repo: Path, site: Path, results: Path | None = None) -> int:
    """asv's site from ``results`` (default: the committed results/) into ``site``, from a copy
    with short labels (``asv_labels``: why a copy); ``results`` itself is only read. The copy, the
    configuration and the site under construction are this process's own, removed on the way out."""
    source = Path(results) if results is not None else Path(repo) / "results"
    site = Path(site).resolve()
    with private_dir("asv") as tmp, private_dir("asv-html", site.parent) as building:
        copy = labelled_copy(source, tmp / "results")
        built = building / "html"
        with private_config(repo, copy) as conf:
            # asv dies with this process, a kill -9 included (the kernel's parent-death signal).
            rc = subprocess.call([*ASV, "publish", "--config", str(conf), "--html-dir", str(built)], cwd=repo,
                                 preexec_fn=lifeline.preexec(os.getpid()))
        if rc != 0:
            return rc
        fill_missing_summaries(built)
        remote = localize(built)
        if remote:
            print(f"oombench pages: asv's site still loads {', '.join(remote)} from the internet: add a local copy "
                  "to harness/drive/asv/asv_vendor/ and its address to asv_site.CDN", file=sys.stderr)
            return 1
        swap_in(built, site)
    return 0
