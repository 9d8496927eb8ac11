"""Where a step's parameters live and how its inputs are laid out: the ``placement`` pieces of
``tricks.make_trainer``, by the knob that decides it (at most one does: ``ways.CONFLICTS``): the
device; the LM's token embedding on the CPU (cpu_embedding); FSDP2's CPU offload (cpu_offload).
Then the inputs' layout: NHWC weights and images under channels_last, floating inputs in the
parameters' dtype (bf16_params)."""
from __future__ import annotations


class CpuEmbedding:
    """The LM with its token embedding on the CPU: token ids stay on the host, only the looked-up
    rows (batch x seq x width) cross to the device, and the vocab x width matrix, its gradient
    and its optimizer state never take device memory."""

    def __init__(self, lm, device):
        self.lm, self.device = lm, device

    def __call__(self, tokens):
        return self.lm.forward_embedded(self.lm.embed(tokens.cpu()).to(self.device))


# Each placement returns (forward, inputs on the device) and enters on ``held`` what must outlive it.
def _on_device(torch, model, inputs, device, held):
    model.to(device)
    return model, tuple(i.to(device) for i in inputs)


def _embedding_on_cpu(torch, model, inputs, device, held):
    # Every part but the embedding is moved: moving it too and back would put the
    # vocab x width matrix on the device for a moment, and into the allocator's peak.
    for name, child in model.named_children():
        if name != "embed":
            child.to(device)
    return CpuEmbedding(model, device), inputs


def _offloaded(torch, model, inputs, device, held):
    from harness.workloads.training.models import blocks
    from harness.workloads.training.offload import offloaded, world_of_one
    held.enter_context(world_of_one(device))
    offloaded(model, blocks(model), device)
    return model, tuple(i.to(device) for i in inputs)


PLACEMENTS = {"": _on_device, "cpu_embedding": _embedding_on_cpu, "cpu_offload": _offloaded}


def placed(torch, model, inputs, device, way, prec, held):
    """(forward, inputs) of ``model`` placed as ``way`` (a ``Way``) says, in ``prec``'s parameter
    dtype (cast on the host, before any placement: no fp32 copy on the device), its inputs laid
    out; what the placement holds is entered on ``held``."""
    if prec.param_dtype is not None:
        model.to(dtype=prec.param_dtype)
    placement = next((v for v in (way.offload, way.embedding) if v and v in PLACEMENTS), "")
    forward, inputs = PLACEMENTS[placement](torch, model, inputs, device, held)
    if way.channels_last:
        model.to(memory_format=torch.channels_last)
        inputs = tuple(i.to(memory_format=torch.channels_last) for i in inputs)
    if prec.param_dtype is not None:
        inputs = tuple(i.to(prec.param_dtype) if i.is_floating_point() else i for i in inputs)
    return forward, inputs
