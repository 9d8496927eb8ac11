"""What a model trained on one device keeps in host memory instead: its activations
(``activations_on_host``: torch's ``save_on_cpu``, bounded), or its parameters, gradients and
optimizer state (FSDP2's ``fully_shard`` with ``CPUOffloadPolicy`` over a world of one process).

Activations kept on the host are pinned on CUDA, through torch's caching host allocator, which
rounds every block up to a power of two: a forward of large activations can pin far more than
it saves, and pinned memory cannot be swapped out, so running out of it ends in the kernel's
out-of-memory killer, not an exception. ``activations_on_host`` counts what one forward has
pinned and stops it as does-not-fit before it passes the host's share
(``harness.measure.guards.workingset.need_host``'s cap).

With one rank nothing is sharded: what FSDP2 buys here is its offload. The sharded parameters
(the whole of them), their gradients and so the optimizer's state live in host memory; each
unit's parameters are copied to the device just before it runs and freed after, and its
gradients copied back after its backward. The optimizer step runs on the CPU. Each block of the
model is its own unit, as in ``harness.workloads.parallelism.distributed``: only one block's parameters are
on the device at a time.

FSDP2 needs a process group even for one rank. ``world_of_one`` starts it in this process over a
``FileStore`` in a temporary folder (no port to find, nothing to collide with) and tears it down
on exit: NCCL on CUDA, gloo on the CPU.
"""
from __future__ import annotations

import contextlib
import tempfile

from harness.measure.outcomes import HOST, DoesNotFit
from harness.units import gb


def host_block(nbytes: int, pinned: bool) -> int:
    """The host memory a saved tensor of ``nbytes`` takes: the next power of two where pinned
    (the caching host allocator's block), itself where not."""
    return 1 << max(nbytes - 1, 0).bit_length() if pinned and nbytes else nbytes


def activations_on_host(torch, pinned: bool, limit_bytes: int, available_bytes: int):
    """A context class like ``torch.autograd.graph.save_on_cpu(pin_memory=pinned)`` (its
    subclass: it packs and unpacks as torch does) that raises DoesNotFit, with the bytes held so
    far, before what one forward keeps on the host passes ``limit_bytes``. The class keeps the
    limit (``limit``) and the bytes of each tensor the latest forward kept (``packed``, as asked,
    before the host allocator rounds them): what the replay of a probe grows the host's share from."""

    class Bounded(torch.autograd.graph.save_on_cpu):
        limit, packed = limit_bytes, []

        def __init__(self):
            super().__init__(pin_memory=pinned)
            pack, held, sizes = self.pack_hook, [0], []
            type(self).packed = sizes

            def counted(tensor):
                sizes.append(tensor.numel() * tensor.element_size())
                held[0] += host_block(sizes[-1], pinned)
                if held[0] > limit_bytes:
                    raise DoesNotFit(
                        f"does not fit: the activations kept on the host pass {gb(held[0])} of "
                        f"{'pinned ' if pinned else ''}host memory in one forward, over the {gb(limit_bytes)} "
                        f"allowed of the {gb(available_bytes)} this host has available: run it on a host with "
                        "more memory", held[0], HOST)
                return pack(tensor)
            self.pack_hook = counted
    return Bounded


@contextlib.contextmanager
def world_of_one(device: str):
    """A process group of this process alone for the duration; refused where one already exists
    (its peers would be drawn into collectives they do not expect)."""
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        raise RuntimeError("cpu_offload starts a process group of its own, and one is already initialised "
                           "here: run the case in a process of its own (as the harness does)")
    with tempfile.TemporaryDirectory(prefix="oombench-pg-") as folder:
        store = dist.FileStore(f"{folder}/store", 1)
        cuda = device == "cuda"
        dist.init_process_group("nccl" if cuda else "gloo", store=store, rank=0, world_size=1,
                                device_id=torch.device("cuda", torch.cuda.current_device()) if cuda else None)
        try:
            yield
        finally:
            dist.destroy_process_group()


def offloaded(model, blocks, device: str):
    """``model`` under FSDP2 with CPUOffloadPolicy, each of ``blocks`` (those with parameters) its
    own unit, then the root. Host memory is pinned on CUDA, so that the copies run at the pinned
    rate; on the CPU there is nothing to pin for. Needs ``world_of_one`` (or any process group)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
    mesh = init_device_mesh(device, (1,))
    policy = CPUOffloadPolicy(pin_memory=device == "cuda")
    for block in blocks:
        if any(True for _ in block.parameters()):
            fully_shard(block, mesh=mesh, offload_policy=policy)
    return fully_shard(model, mesh=mesh, offload_policy=policy)


def saving(torch, way, device):
    """Where autograd keeps what the forward saves for backward: on the CPU for ``save_on_cpu``
    (pinned on CUDA, so that the copies out and back run at the pinned rate and asynchronously;
    on the CPU there is nothing to copy), held to the host's share of its memory; else where it
    was made (None)."""
    if way.offload != "save_on_cpu":
        return None
    from harness.measure.guards.workingset import host_available, host_share
    available = host_available()
    return activations_on_host(torch, device == "cuda", host_share(available), available)
