"""asv's benchmarks: thin classes over harness cases, one module per family.

In an existing environment (``asv run --python=same``, ``-E existing:...``, and ``python3 -m
harness run``) asv installs nothing and measures the checkout as it is: its own ``harness`` comes
first, not one installed from another checkout. An environment that asv builds
(``asv.versions.conf.json``) holds the project at the commit it measures, and says which
(``ASV_COMMIT``): that one is used.
"""
import os
import sys
from pathlib import Path

_CHECKOUT = str(Path(__file__).resolve().parents[1])
if not os.environ.get("ASV_COMMIT") and _CHECKOUT not in sys.path:
    sys.path.insert(0, _CHECKOUT)
