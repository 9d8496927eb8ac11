"""Copies between pageable (ordinary) host memory and the device, swept over the buffer size.

A pageable copy goes through a staging buffer the driver pins for it, so its rate depends on
the buffer's size and on the host (its memory, its kernel's page handling) far more than a pinned
copy does: no single buffer stands for it. The ceiling quoted is the best size; the sweep is
kept beside it. What CPU offload and the CPU embedding pay is read against this.
"""
from __future__ import annotations

from harness.cases.base import Case
from harness.units import MiB
from harness.workloads.copies import host_link

DIRECTIONS = ("h2d", "d2h")
SIZES_MIB = (64, 128, 256, 512, 1024, 2048)


def build(direction: str, size_mib: int):
    return host_link(direction, pinned=False, nbytes=size_mib * MiB)


CASE = Case(name="pageable", params={"direction": DIRECTIONS, "size_mib": SIZES_MIB}, build=build,
            declared_bytes=lambda direction, size_mib: 2 * size_mib * MiB, host_paced=lambda **_: True, doc=__doc__)
