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


@contextmanager
def alarm(seconds: float, expired: Callable[[], BaseException]) -> Iterator[list]:
    """Past ``seconds`` of real time inside the block, ``expired()`` raised in the main thread (once).
    Yields a list that holds True once it fired, so that a caller whose callee caught and wrapped the
    exception still knows. The timer and SIGALRM's handler are put back on the way out."""
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(True)
            raise expired()
    with handlers({signal.SIGALRM: handler}):
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield fired
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
