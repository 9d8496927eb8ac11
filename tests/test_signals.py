"""Signal handlers for a block (harness.measure.guards.signals): set inside it, and those they replaced
put back on the way out however the block is left."""
import signal

import pytest

from harness.measure.guards.signals import handlers, kept


def mine(signum, frame):
    pass


def theirs(signum, frame):
    pass


@pytest.fixture
def usr():
    """SIGUSR1 ignored and SIGUSR2 handled by ``theirs`` for the test; the session's handlers after."""
    before = {signal.SIGUSR1: signal.signal(signal.SIGUSR1, signal.SIG_IGN),
              signal.SIGUSR2: signal.signal(signal.SIGUSR2, theirs)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_the_handlers_given_handle_their_signals_inside_alone(usr):
    with handlers({signal.SIGUSR1: mine, signal.SIGUSR2: mine}):
        assert signal.getsignal(signal.SIGUSR1) is mine and signal.getsignal(signal.SIGUSR2) is mine
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN and signal.getsignal(signal.SIGUSR2) is theirs


def test_the_handlers_replaced_come_back_when_the_block_raises(usr):
    with pytest.raises(KeyError):
        with handlers({signal.SIGUSR2: mine}):
            raise KeyError("what the block met")
    assert signal.getsignal(signal.SIGUSR2) is theirs and signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN


def test_a_signal_not_given_is_left_to_what_the_block_sets(usr):
    with handlers({signal.SIGUSR1: mine}):
        signal.signal(signal.SIGUSR2, mine)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN and signal.getsignal(signal.SIGUSR2) is mine


def test_the_handlers_kept_are_back_whatever_the_block_set_for_them(usr):
    with pytest.raises(KeyError):
        with kept([signal.SIGUSR1, signal.SIGUSR2]):
            signal.signal(signal.SIGUSR1, mine)
            signal.signal(signal.SIGUSR2, signal.SIG_DFL)
            raise KeyError("what the block met")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN and signal.getsignal(signal.SIGUSR2) is theirs
