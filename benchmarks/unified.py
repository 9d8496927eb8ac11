"""CuPy on unified (managed) memory, against the device pools and explicit out-of-core streaming.

Placements that keep the working set on the device run up to 0.8 of the card (under the guard's
cap). Placements that start every step on the host move the whole set each step, so they are
held to 0.1 of the card: their rates are flat from 0.02 on (fault-driven streaming on an H100:
7.6 GB/s at 0.02, 7.5 at 0.1, 7.4 at 0.25), while the host memory and device time they take grow
with the set. 0.25 stays declared by the case (``python3 -m harness case unified ...``). 1.5 is
oversubscription: declared everywhere, run only with the opt-in (the device pools cannot hold it
and record "does not fit").

Beyond a budget: ``Beyond`` runs working sets of 1.5 and 3 x an emulated 16, 24 or 40 GB card by
each way out (``harness.cases.beyond``), and ``Seed000`` the seed's three 8 GiB arrays on an
emulated P100, under a 16 GB cap and under the whole card. Sets that need more host memory than
the host check allows skip with their reason.
"""
from harness.cases.out_of_core import PATTERNS as STREAMED
from harness.cases.unified import FROM_HOST, PATTERNS
from harness.cases.unified_seed import FRACTIONS as SEED_FRACTIONS
from harness.cases.beyond import TIMES, WAYS
from harness.workloads.cupy.managed import POOLS

from benchmarks.common import _OnDevice

ON_DEVICE = [0.1, 0.4, 0.8, 1.5]
ON_HOST = [0.02, 0.1, 1.5]


class Allocators(_OnDevice):
    case = "unified"
    fixed = {"placement": "resident"}
    param_names = ["allocator", "pattern", "fraction"]
    params = [list(POOLS), list(PATTERNS), ON_DEVICE]


class Placements(_OnDevice):
    case = "unified"
    fixed = {"allocator": "managed_pool"}
    param_names = ["placement", "pattern", "fraction"]
    params = [list(FROM_HOST), list(PATTERNS), ON_HOST]


class OutOfCore(_OnDevice):
    case = "out_of_core"
    fixed = {"budget": "card"}
    param_names = ["pattern", "fraction"]
    params = [list(STREAMED), ON_HOST]


class Seed(_OnDevice):
    case = "unified_seed"
    param_names = ["fraction"]
    params = [list(SEED_FRACTIONS)]


class Beyond(_OnDevice):
    case = "beyond"
    param_names = ["way", "pattern", "budget", "times"]
    params = [list(WAYS), list(PATTERNS), ["16GB", "24GB", "40GB"], list(TIMES)]


class Seed000(_OnDevice):
    case = "seed000"
    param_names = ["way", "budget"]
    params = [list(WAYS), ["p100-16gb", "16GB", "card"]]
