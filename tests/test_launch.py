"""The launcher of a parallel case's ranks on the CPU (two processes forked from the launch's fork
server, workers that import nothing heavy): a rank's failure, out of memory or skip comes back as
the case's outcome naming the rank; the case's own signal handlers and environment are back after
a launch; the ranks run with NVLink multicast off and the transport asked; the fork server dies
with its agent; a launch waits for its GPUs' locks. (The
strategies' training: tests/test_parallel.py; kills of every kind: tests/test_kills_ranks.py.)"""
import contextlib
import inspect
import io
import os
import signal
import time
from types import SimpleNamespace

import psutil
import pytest

import launch_workers  # beside this file: what each rank imports as it starts, light
from lock_holder import hold

from harness.workloads.parallelism.launch import AGENT_SIGNALS, LaunchError, caller_name, launch


@pytest.mark.parametrize("worker, message", [
    (launch_workers.raises_on_rank_1, "local rank 1 failed with RuntimeError: boom from the test"),
    (launch_workers.exits_on_rank_1, "rank 1 exited with code 3"),
])
def test_a_failing_rank_fails_the_launch_and_names_the_rank(tmp_path, worker, message):
    before = _children()
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=message):
        launch(worker, 2, (str(tmp_path),), timeout_s=120)
    assert time.monotonic() - t0 < 100  # not the peer's 60 s sleep on top of the launch
    assert _workers_left(before) == []


@pytest.fixture(scope="module")
def settings_launch(tmp_path_factory):
    """One launch of ``first_sight`` from a case that has handlers of its own for the signals
    elastic's agent takes over, after a careless shell exported NCCL_NVLS_ENABLE=1, while another
    process held the lock of the one GPU the launch uses: what each rank saw, the case's handlers,
    its handlers and environment once the launch is over, how long the launch took, what it said
    on stderr, and the holder's pid. One launch for every test that reads it: each costs seconds."""
    from harness.measure.guards import locks
    mine = {sig: (lambda signum, frame: None) for sig in AGENT_SIGNALS}
    pytests = {sig: signal.signal(sig, handler) for sig, handler in mine.items()}
    other = None
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("NCCL_NVLS_ENABLE", "1")
            mp.setenv(locks.LOCK_DIR_ENV, str(tmp_path_factory.mktemp("locks")))
            mp.setattr(locks, "visible_gpu_uuids", lambda ordinals: ["GPU-test-0"])
            other = hold(locks.gpu_lock("GPU-test-0"), seconds=1.5)
            said = io.StringIO()
            t0 = time.monotonic()
            with contextlib.redirect_stderr(said):
                seen = launch(launch_workers.first_sight, 2, timeout_s=120)
            return SimpleNamespace(seen=seen, mine=mine, after={sig: signal.getsignal(sig) for sig in AGENT_SIGNALS},
                                   env=dict(os.environ), took_s=time.monotonic() - t0, said=said.getvalue(),
                                   holder=other.pid)
    finally:
        for sig, handler in pytests.items():
            signal.signal(sig, handler)
        if other is not None:
            other.kill()
            other.wait()


def test_the_case_ends_on_sigterm_after_a_launch_as_before_it(settings_launch):
    """Elastic's agent installs its own SIGTERM handler (an exception in whatever runs); after the
    launch the case's own handlers are back, so a SIGTERM ends the case instead of raising inside it."""
    assert settings_launch.seen
    assert settings_launch.after == settings_launch.mine


def test_the_launcher_holds_the_gpus_lock(settings_launch):
    """Another process held the GPU's lock for 1.5 s: the launch waited for it, naming the holder."""
    assert settings_launch.seen
    assert settings_launch.took_s > 0.5
    assert f"GPU GPU-test-0 is in use by pid {settings_launch.holder}" in settings_launch.said


def named_by(namer) -> str:
    """The name ``namer`` gives an event recorded from ``rendezvous_step``, as elastic's rendezvous
    records one: ``_record`` asks the namer, which reads two frames above itself."""
    def _record():
        return namer()

    def rendezvous_step():
        return _record()
    return rendezvous_step()


def test_rendezvous_events_are_named_as_torch_names_them_by_a_walk_of_frames(settings_launch):
    """The launch's rendezvous names each event it records by walking two frames up, not by
    ``inspect.stack()`` (which reads the source of every frame of the stack): the same name as
    torch's own, and its "no_method_name" where the stack is not that deep."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    def torchs(depth=2):  # dynamic_rendezvous.get_method_name as torch writes it
        return inspect.stack()[depth].function if len(inspect.stack()) > depth else "no_method_name"
    assert settings_launch.seen and dynamic_rendezvous.get_method_name is caller_name  # the launch set it
    assert named_by(caller_name) == named_by(torchs) == "rendezvous_step"
    assert caller_name(10**6) == torchs(10**6) == "no_method_name"
    assert caller_name(1) == "test_rendezvous_events_are_named_as_torch_names_them_by_a_walk_of_frames"


def _children() -> set:
    """This process's descendants now: what was running before a launch (a browser another module of
    this worker started, say) is not the launch's."""
    return {c.pid for c in psutil.Process().children(recursive=True)}


def _workers_left(before: set) -> list:
    """Descendants still running that neither were running at ``before`` nor descend from one that
    was (a browser starts processes of its own): the launch's, left behind."""
    # multiprocessing's resource tracker is one per parent, shared by every launch, and holds no GPU.
    def left(c) -> bool:
        try:
            return (not {c.pid, *(p.pid for p in c.parents())} & before
                    and "resource_tracker" not in " ".join(c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:  # it exited while looked at: not left
            return False
    return [c for c in psutil.Process().children(recursive=True) if left(c)]


def test_workers_run_with_nvlink_multicast_off_and_the_transport_asked(settings_launch, monkeypatch):
    from harness.measure.guards.safety import MULTICAST_OFF
    from harness.workloads.parallelism.launch import SOCKETS
    from harness.workloads.parallelism.nodes import Nodes
    seen, env = settings_launch.seen, settings_launch.env  # NCCL_NVLS_ENABLE=1 exported
    assert {rank: saw["nccl"] for rank, saw in seen.items()} == {0: MULTICAST_OFF, 1: MULTICAST_OFF}
    assert env["NCCL_NVLS_ENABLE"] == "1" and "NCCL_P2P_DISABLE" not in env  # the case's own: as before
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # what a careless shell might export
    sockets = launch(launch_workers.nccl_settings, 2, timeout_s=120, nodes=Nodes(count=2, transport="sockets"))
    assert list(sockets.values()) == [{**MULTICAST_OFF, **SOCKETS}]  # this node's one rank
    assert os.environ["NCCL_NVLS_ENABLE"] == "1" and "NCCL_P2P_DISABLE" not in os.environ  # the case's own: as before


def test_the_ranks_fork_server_imported_nothing_that_initialises_cuda(settings_launch):
    """The ranks fork from the server: CUDA must not have been initialised there, nor a module
    imported whose import may initialise it on a GPU box (by the server's preload, or the worker's
    module, which each rank imports)."""
    assert [saw["imported"] for saw in settings_launch.seen.values()] == [[], []]
    assert [saw["cuda_initialized"] for saw in settings_launch.seen.values()] == [False, False]


@pytest.mark.parametrize("started_by_its_parent", [True, False])
def test_the_ranks_fork_server_dies_with_the_agent_that_started_it(started_by_its_parent):
    """The fork server, importing the launcher, asks for SIGKILL on its parent's death, and leaves
    at once when its parent is no longer the agent named (the agent died before it asked); the
    name is not left in the environment the ranks inherit. A forked child stands for the server."""
    import ctypes
    from harness.measure.guards.lifeline import ORPHANED
    from harness.workloads.parallelism import launch as launcher
    pid = os.fork()
    if pid == 0:  # the child: whatever happens, it leaves through os._exit
        code = 1
        try:
            agent = os.getppid() if started_by_its_parent else os.getppid() + 100_000
            os.environ[launcher.SERVER_OF] = str(agent)
            launcher.bind_to_starter(launcher.SERVER_OF)  # what the launcher runs as the server imports it
            asked = ctypes.c_int(0)
            ctypes.CDLL("libc.so.6").prctl(2, ctypes.byref(asked), 0, 0, 0)  # PR_GET_PDEATHSIG
            code = 0 if asked.value == signal.SIGKILL and launcher.SERVER_OF not in os.environ else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == (0 if started_by_its_parent else ORPHANED)


def test_a_worker_out_of_memory_is_does_not_fit_and_a_worker_skip_is_a_skip():
    from harness.measure.outcomes import DoesNotFit, Skip, requested_bytes
    before = _children()
    with pytest.raises(DoesNotFit, match="local rank 1") as e:
        launch(launch_workers.runs_out_of_memory_on_rank_1, 2, timeout_s=120)
    assert e.value.requested_bytes == 20 * 2**30 == requested_bytes(str(e.value))
    with pytest.raises(Skip, match="needs something this box lacks"):
        launch(launch_workers.skips_on_rank_0, 2, timeout_s=120)
    assert _workers_left(before) == []

