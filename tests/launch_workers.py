"""Workers for the launcher's clean-up tests. A module of their own, importing nothing heavy:
each rank imports the module its worker lives in as it starts."""
import os
import subprocess
import time


def raises_on_rank_1(rank, world, pid_dir):
    note_pid(pid_dir, rank)
    if rank == 1:
        raise RuntimeError("boom from the test")
    time.sleep(60)  # a healthy peer, blocked as if in a collective


def exits_on_rank_1(rank, world, pid_dir):
    note_pid(pid_dir, rank)
    if rank == 1:
        os._exit(3)
    time.sleep(60)


def hangs_with_a_child(rank, world, pid_dir):
    child = subprocess.Popen(["sleep", "600"])  # a grandchild: must die with its rank
    note_pid(pid_dir, f"{rank}-child", child.pid)
    note_pid(pid_dir, rank)
    time.sleep(600)  # past any deadline the tests give


def note_pid(pid_dir, name, pid=None):
    # Written whole or not at all: the launcher may kill this worker mid-write, and a reader must
    # never find an empty pid file.
    tmp = os.path.join(pid_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(str(pid or os.getpid()))
    os.replace(tmp, os.path.join(pid_dir, str(name)))


def nccl_settings(rank, world):
    names = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "NCCL_P2P_DISABLE",
             "NCCL_SHM_DISABLE")
    return {n: os.environ[n] for n in names if n in os.environ}


# Modules whose import can initialise CUDA (torch._dynamo asks triton's GPU check where triton is
# installed): none may be in the fork server the ranks fork from.
CUDA_ON_IMPORT = ("torch._dynamo", "torch._inductor", "triton")


def first_sight(rank, world):
    """What a rank finds as it starts: its NCCL settings, and what its fork server imported or
    initialised that would break CUDA in a forked rank."""
    import sys
    import torch
    return {"nccl": nccl_settings(rank, world), "imported": [m for m in CUDA_ON_IMPORT if m in sys.modules],
            "cuda_initialized": torch.cuda.is_initialized()}


def runs_out_of_memory_on_rank_1(rank, world):
    if rank == 1:
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    return rank


def skips_on_rank_0(rank, world):
    from harness.measure.outcomes import Skip
    if rank == 0:
        raise Skip("needs something this box lacks")
    return rank


def forks_a_child_and_raises(rank, world, pid_dir):
    """Rank 1 starts a child, then fails; rank 0 starts one and waits as if in a collective."""
    child = subprocess.Popen(["sleep", "60"])
    note_pid(pid_dir, f"{rank}-child", child.pid)
    note_pid(pid_dir, rank)
    if rank == 1:
        deadline = time.monotonic() + 120  # fail once rank 0 has noted its child too, so that the test sees both
        while not os.path.exists(os.path.join(pid_dir, "0")) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("boom after starting a child")
    time.sleep(60)
