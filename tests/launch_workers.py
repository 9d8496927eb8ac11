"""Workers for the launcher's clean-up tests. A module of their own, importing nothing heavy:
a spawned worker imports the module its function lives in, and torch would take longer to
import than the tests' deadlines."""
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
    child = subprocess.Popen(["sleep", "60"])  # a grandchild: must die with its worker's group
    note_pid(pid_dir, f"{rank}-child", child.pid)
    note_pid(pid_dir, rank)
    time.sleep(60)


def note_pid(pid_dir, name, pid=None):
    # Written whole or not at all: the launcher may kill this worker mid-write, and a reader must
    # never find an empty pid file.
    tmp = os.path.join(pid_dir, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(str(pid or os.getpid()))
    os.replace(tmp, os.path.join(pid_dir, str(name)))


def multicast_settings(rank, world):
    names = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
    return {n: os.environ.get(n) for n in names}


def runs_out_of_memory_on_rank_1(rank, world):
    if rank == 1:
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
    return rank


def skips_on_rank_0(rank, world):
    from harness.measure.outcomes import Skip
    if rank == 0:
        raise Skip("needs something this box lacks")
    return rank
