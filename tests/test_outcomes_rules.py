"""How a case's end other than a figure is read (harness.measure.outcomes), rule by rule: the size
an out-of-memory message asked for, what counts as out of memory, and the loss check every
training case makes."""
import math

import pytest

from harness.measure.outcomes import CheckFailed, DoesNotFit, as_does_not_fit, is_out_of_memory, learned


def test_an_error_that_is_no_out_of_memory_error_keeps_its_first_line_or_its_type():
    assert str(as_does_not_fit(RuntimeError("CUDA out of memory.\nTried to allocate 2.00 GiB"))) == \
        "does not fit: CUDA out of memory."
    blank = as_does_not_fit(MemoryError())
    assert str(blank) == "does not fit: MemoryError" and blank.requested_bytes is None
    spaced = as_does_not_fit(RuntimeError("  \n"))
    assert str(spaced) == "does not fit: RuntimeError"


def test_the_size_asked_comes_from_the_message_else_the_case_s_own_figure():
    said = as_does_not_fit(RuntimeError("Tried to allocate 2.00 GiB"), declared_bytes=5)
    assert said.requested_bytes == 2 * 2**30
    assert as_does_not_fit(RuntimeError("out of memory"), declared_bytes=5).requested_bytes == 5
    assert as_does_not_fit(RuntimeError("tried to allocate 0 bytes"), declared_bytes=5).requested_bytes == 0
    mine = DoesNotFit("x", 7)
    assert as_does_not_fit(mine, declared_bytes=5) is mine


@pytest.mark.parametrize("exc, oom", [
    (MemoryError(), True), (DoesNotFit("x"), True),
    (type("OutOfMemoryError", (Exception,), {})("CUDA"), True),
    (RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"), True),
    (RuntimeError("Can't Allocate Memory"), True),
    (ValueError("out of memory"), False),  # only a RuntimeError's words are read
    (RuntimeError("index out of range"), False),
])
def test_what_counts_as_out_of_memory(exc, oom):
    assert is_out_of_memory(exc) is oom


def test_by_default_the_last_loss_must_be_below_the_first_itself():
    with pytest.raises(CheckFailed):
        learned([1.0, 1.5])


def test_a_size_in_a_unit_nobody_uses_is_no_size():
    from harness.measure.outcomes import requested_bytes
    assert requested_bytes("Tried to allocate 5 zorks") is None
    assert requested_bytes("Unable to allocate 1,024 KiB for an array") == 2**20


def test_a_loss_curve_passes_when_every_loss_is_finite_and_the_last_is_below_the_first():
    assert learned([2.0, 1.5, 1.0]) == {"loss_first": 2.0, "loss_last": 1.0, "steps": 3}
    assert learned([2.0, 0.9], drop=0.5) == {"loss_first": 2.0, "loss_last": 0.9, "steps": 2}


@pytest.mark.parametrize("losses, drop, says", [
    ([], 1.0, "no training step ran: ask for at least one"),
    ([2.0, math.nan, 1.0], 1.0, "loss is nan at step 2: this technique broke training"),
    ([math.inf], 1.0, "loss is inf at step 1: this technique broke training"),
    ([2.0, 2.0], 1.0, "training did not learn: loss 2 at the first step, 2 after 2"),
    ([2.0, 1.0, 2.5], 1.0, "training did not learn: loss 2 at the first step, 2.5 after 3"),  # the last, not the best
    ([2.0, 1.0], 0.5, "training did not learn: loss 2 at the first step, 1 after 2 (needs below 0.5 x the first)"),
])
def test_a_loss_curve_that_fails_names_the_step_or_the_shortfall(losses, drop, says):
    with pytest.raises(CheckFailed) as e:
        learned(losses, drop=drop)
    assert str(e.value) == says
