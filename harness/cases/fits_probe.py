"""One "what fits" probe, alone in its process:
``python -m harness.cases.fits_probe CONFIG_JSON N CAP_BYTES batch|seq_len``.

CONFIG_JSON is the probe's own config, the ``tricks`` step the search starts from, as
``Config.to_json`` wrote it in the fits case (``harness.workloads.search.fits.probe_argv``); it is read
back with ``Config.from_json``, which validates it again, as any input from outside the process.
N is how far the probe grows that step along the last argument, with torch's allocator capped
at CAP_BYTES (``harness.workloads.search.fits_probe`` runs it); RECORD_PATH, where given, receives the
allocator's requests on a GPU. Prints one JSON line with the answer;
out of memory is an answer (exit 0), any other error a broken probe (exit 1).

First of all the probe binds itself to the search that started it (its pid in
``OOMBENCH_PARENT_PID``; ``harness.measure.guards.lifeline.bind``): a probe whose search is gone
exits before building anything, and one whose search dies is killed with it.
"""
from __future__ import annotations

import json
import sys

from harness.measure.guards import lifeline

USAGE = "usage: python -m harness.cases.fits_probe CONFIG_JSON N CAP_BYTES batch|seq_len [RECORD_PATH]"


def main(argv=None) -> int:
    lifeline.bind(lifeline.parent_from_env())
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (4, 5):
        raise SystemExit(USAGE)
    from harness.cases.base import Config
    from harness.workloads.search.fits_probe import probe
    config = Config.from_json(argv[0], case="tricks")
    print(json.dumps(probe(config.params, int(argv[1]), int(argv[2]), argv[3], *argv[4:])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
