"""Signal handlers for the length of a block, put back as they were however the block is left.

Standard library only: set-up (harness.drive.commands.bootstrap) uses it before any dependency is installed.
Python sets handlers in the main thread alone, so these are entered there.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping


@contextmanager
def handlers(new: Mapping[int, Callable]) -> Iterator[None]:
    """``new`` ({signal: handler}) handles its signals inside the block; the handlers it replaced
    are put back on the way out."""
    with _put_back({sig: signal.signal(sig, handler) for sig, handler in new.items()}):
        yield


@contextmanager
def kept(signals: Iterable[int]) -> Iterator[None]:
    """The handlers of ``signals`` as they are now, put back on the way out: whatever the block
    (or what it calls) sets for them lasts no longer than the block."""
    with _put_back({sig: signal.getsignal(sig) for sig in signals}):
        yield


@contextmanager
def _put_back(before: Mapping[int, Callable]) -> Iterator[None]:
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
