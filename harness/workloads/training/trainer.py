"""One optimizer step over a batch cut into micro-batches, in a chosen precision.

Gradient accumulation: each micro-batch's summed loss is divided by the target count of the
WHOLE batch before backward, so the gradients that add up in ``.grad`` are exactly the
full batch's mean-loss gradient (for a model without batch statistics), whatever the split.

The precision it computes in is a ``harness.workloads.training.precision.Precision``.

The loop itself drops what it no longer needs: each micro-batch's logits and loss die when its
backward is done, and ``zero_grad(set_to_none=True)`` frees the gradients before the next
forward. ``keep_references=True`` is the everyday loop instead (``out = model(x)``,
``loss = ...`` and ``optimizer.zero_grad(set_to_none=False)`` at the top of each step): the last
outputs and loss stay alive until the next forward has returned, and zeroed gradients stay
allocated through it, so the next forward runs beside them.
"""
from __future__ import annotations

import contextlib
import threading

from harness.measure.guards.signals import alarm
from harness.measure.outcomes import Skip
from harness.measure.workload import BENCHMARK_TIMEOUT_S
from harness.workloads.training.precision import Precision

LR, LR_WIDTH = 1e-3, 1024  # Adam's rate, as chosen for transformers up to LR_WIDTH wide (and for ResNet50)


def learning_rate(width: int) -> float:
    """Adam's rate for a transformer ``width`` wide: ``LR`` up to ``LR_WIDTH``, and ``LR`` x
    ``LR_WIDTH`` / ``width`` above it. Adam moves every weight by about its rate whatever the
    layer's fan-in, so a layer's output moves in proportion to its width (why muP scales Adam's
    rate for hidden layers as 1 / width): at the rate chosen for 1024 a wider model's loss jumps
    from step to step, and any rounding (bf16's, say) sends two runs of it far apart. Narrower
    models keep the rate they were measured with."""
    return LR * min(1.0, LR_WIDTH / width)


# torch.compile's mode by the compile knob's value
COMPILE_MODES = {"compile": "default", "compile_max_autotune": "max-autotune-no-cudagraphs"}
# A first step that compiles is stopped past this, so that its case ends with the reason, inside
# asv's limit for a benchmark, rather than being killed with none (the rest of the limit is for the
# process, the timed steps and the loss check).
COMPILE_LIMIT_S = BENCHMARK_TIMEOUT_S - 120.0


def compiled(forward, token: str):
    """``forward`` through torch.compile in ``token``'s mode (compiled on its first call); as it is
    for no token."""
    if not token:
        return forward
    import torch
    return torch.compile(forward, mode=COMPILE_MODES[token])


def losses_of(trainer, steps: int) -> list[float]:
    """The losses of ``steps`` steps of ``trainer``, closed afterwards, done or not."""
    try:
        for _ in range(steps):
            trainer.step()
        return [float(v) for v in trainer.losses]
    finally:
        trainer.close()


def split(tensors, micro_batch: int) -> list[tuple]:
    """The batch (a tuple of tensors sharing dim 0) cut into micro-batches of ``micro_batch``."""
    batch = tensors[0].shape[0]
    if micro_batch < 1 or batch % micro_batch:
        raise ValueError(f"micro-batch {micro_batch} must divide the batch {batch}: pick a divisor of it")
    return list(zip(*(t.split(micro_batch) for t in tensors)))


class KeptOutput:
    """A forward that keeps its last output alive until the next forward has returned, as
    ``out = model(x)`` in a loop keeps the previous step's ``out`` while the next one is computed."""

    def __init__(self, forward):
        self.forward, self.last = forward, None

    def __call__(self, *args, **kwargs):
        out = self.forward(*args, **kwargs)
        self.last = out
        return out


class Trainer:
    """Adam on ``model``'s parameters; ``loss_sum(forward, inputs, targets) -> (summed loss,
    target count)``, where ``forward`` is ``model`` unless given (a wrapper that runs part of it
    elsewhere). ``micro_batches`` is a list of (inputs, targets), inputs a tuple of arguments.
    ``compile_with``: the compile knob's value (``compiled``), its forward compiled in that mode.
    ``saving()``: the context each forward runs in for what autograd saves (where to keep the
    activations; none by default). ``keep_references``: the everyday loop (see the module's
    docstring). ``close()`` runs ``on_close``'s callbacks (a process group to tear down)."""

    def __init__(self, model, micro_batches, loss_sum, prec: Precision, device_type: str, lr: float = LR,
                 forward=None, saving=None, keep_references: bool = False, optimizer=None, clock_first: bool = False,
                 compile_with: str = ""):
        import torch
        self.torch, self.model, self.micro_batches, self.loss_sum = torch, model, micro_batches, loss_sum
        self.forward = compiled(forward if forward is not None else model, compile_with)
        self.keep_references, self.kept_loss = keep_references, None
        if keep_references:
            self.forward = KeptOutput(self.forward)
        self.saving = saving or contextlib.nullcontext
        self.on_close = []
        self.prec, self.device_type = prec, device_type
        self.feed(micro_batches)
        # Only the weights that train: a frozen one (under LoRA) has no gradient and no optimizer state.
        trained = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = (optimizer or torch.optim.Adam)(trained, lr=lr)
        # The wall time of the first two steps, where ``clock_first``: the first compiles what the
        # second reuses, so their difference is the compile time (``compile_s``).
        self.clock_first, self.first_steps_s = clock_first, []
        self.scaler = torch.amp.GradScaler(device_type, enabled=prec.scaler)
        self.losses = []
        self.skipped = []  # per step: True where the scaler found inf/NaN gradients and left the weights alone
        self.scale = self.scaler.get_scale()  # the initial scale (no device read yet); 1.0 when disabled

    def feed(self, micro_batches):
        """The micro-batches the next steps train on, and the whole batch's target count (every
        micro-batch's loss is a share of one mean). A workload whose shapes change from step to
        step feeds each step its own."""
        with self.torch.no_grad():
            self.count = sum(int(self.loss_sum(None, None, t)[1]) for _, t in micro_batches)
        self.micro_batches = micro_batches

    def _autocast(self):
        if self.prec.autocast is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device_type, dtype=self.prec.autocast)

    def backward(self):
        """Gradients of the whole batch's mean loss, summed over micro-batches into ``.grad``;
        returns that loss (a tensor: reading it would synchronise)."""
        total = 0.0
        for inputs, targets in self.micro_batches:
            with self._autocast(), self.saving():
                loss_sum, _ = self.loss_sum(self.forward, inputs, targets)
            loss = loss_sum.float() / self.count
            self.scaler.scale(loss).backward()
            total = total + loss.detach()
            if self.keep_references:
                self.kept_loss = loss
        return total

    def step(self):
        if self.clock_first and len(self.first_steps_s) < 2:
            import time
            start = time.perf_counter()
            with self._compile_limit() if not self.first_steps_s else contextlib.nullcontext():
                self._step()
                self.losses[-1].item()  # waits for the step's kernels
            self.first_steps_s.append(time.perf_counter() - start)
        else:
            self._step()

    @contextlib.contextmanager
    def _compile_limit(self):
        """The first step, which compiles, within ``COMPILE_LIMIT_S``: past it, a Skip that says so
        (however the compiler wrapped the alarm's exception). Timers are the main thread's alone."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        limit = COMPILE_LIMIT_S
        def too_slow():
            return Skip(f"its first step, which compiles, had not ended after {limit:.0f} s, so it was stopped "
                        "there: this way compiles too slowly here to be timed within a benchmark's "
                        f"{BENCHMARK_TIMEOUT_S} s (asv's limit, which would end it with no reason)")
        with alarm(limit, too_slow) as fired:
            try:
                yield
            except BaseException as e:
                if fired and not isinstance(e, Skip):
                    raise too_slow() from e
                raise

    @property
    def compile_s(self) -> float | None:
        """What the first step took beyond the second: the time it spent compiling; None before two
        clocked steps."""
        return self.first_steps_s[0] - self.first_steps_s[1] if len(self.first_steps_s) == 2 else None

    def _step(self):
        self.optimizer.zero_grad(set_to_none=not self.keep_references)
        loss = self.backward()
        self.scaler.step(self.optimizer)  # skips the update if fp16 gradients overflowed
        self.scaler.update()
        self.losses.append(loss)
        if self.scaler.is_enabled():
            # The scaler lowers its scale on exactly the steps it skipped. Reading it waits for the
            # step's kernels, which the harness waits for at the end of every timed step anyway.
            before, self.scale = self.scale, self.scaler.get_scale()
            self.skipped.append(self.scale < before)
        else:
            self.skipped.append(False)

    def close(self):
        while self.on_close:
            self.on_close.pop()()


def token_loss_sum(model, inputs, targets):
    """Summed next-token cross-entropy over non-padding targets, and their count. With
    ``model=None`` only the count (the trainer asks for it up front)."""
    import torch
    from harness.workloads.training.seqdata import IGNORE
    count = (targets != IGNORE).sum()
    if model is None:
        return None, count
    logits = model(*inputs)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, -2), targets.flatten(),
                                             ignore_index=IGNORE, reduction="sum")
    return loss, count


def image_loss_sum(model, inputs, targets):
    """Summed cross-entropy against (one-hot) class probabilities, and the number of samples."""
    import torch
    if model is None:
        return None, targets.shape[0]
    logits = model(*inputs)
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum"), targets.shape[0]
