"""Cases whose measuring process died: each is begun in the run's begun log before it is
measured, so that one which ends without a record (SIGKILL from the kernel's out-of-memory
killer, a crash in native code) is known, not silently missing.

Within one ``harness run``, a case that died is not measured again by the benchmark's next
figure (asv gives each tracked figure a process of its own, and the next one would find no
record and run the case again, dying again). When asv is done, each such case is filed as a
``failed`` record saying what happened; so is a case whose measuring raised. A run that was
stopped files none: ``--resume`` measures those cases again.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from harness.measure.guards.inputs import disk_full, disk_is_full, disk_nearly_full
from harness.measure.outcomes import FAILED
from harness.measure.records.record import Record
from harness.measure.records.store import RecordStore, RunContext, append_line, load_file, read_lines
from harness.units import gb


# How a case ended that had no space to file into (``check.ended``): measured again on --resume.
DISK_FULL = "disk_full"
# Where the kernel counts the processes its out-of-memory killer ended in this cgroup: v2, then v1.
OOM_EVENTS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def oom_kills(paths=None) -> int | None:
    """The cgroup's count of out-of-memory kills; None where no cgroup file says."""
    for path in paths or OOM_EVENTS:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for fields in map(str.split, lines):  # "oom_kill 3" in both versions' layouts
            if len(fields) == 2 and fields[0] == "oom_kill" and fields[1].isdigit():
                return int(fields[1])
    return None


def begin(ctx: RunContext, case: str, params: dict) -> None:
    """Notes that this process begins measuring ``case`` at ``params`` for the run, with the
    cgroup's out-of-memory kills so far (the killer's work, if the process dies, is told by it)."""
    append_line(RecordStore.begun_log(ctx.path), {"case": case, "params": params, "pid": os.getpid(),
                                                  "harness_pid": ctx.parent_pid, "began": time.time(),
                                                  "oom_kills": oom_kills()})


def oom_killed(entry: dict, kills_now: int | None) -> bool:
    """Whether the out-of-memory killer ended a process of this cgroup since ``entry`` began:
    cases are measured one at a time, so the one that died without a record."""
    before = entry.get("oom_kills")
    return isinstance(before, int) and isinstance(kills_now, int) and kills_now > before


def died(ctx: RunContext, case: str, params: dict) -> dict | None:
    """The begun entry of ``case`` at ``params`` left by an earlier process of this same harness
    run that ended without a record; None where there is none."""
    return next((e for e in _lost(ctx) if e["case"] == case and e["params"] == params), None)


def reason(entry: dict, host_bytes: int | None = None, kills_now: int | None = None) -> str:
    host = f" ({gb(host_bytes)} here)" if host_bytes else ""
    if oom_killed(entry, kills_now):
        return (f"its process (pid {entry['pid']}) was ended while measuring by the kernel's out-of-memory killer: "
                f"host memory ran out{host}; run it on a host with more memory")
    return (f"its process (pid {entry['pid']}) ended while measuring, without a record: killed (by asv at the "
            f"benchmark's timeout, or by the kernel's out-of-memory killer when host memory runs out{host}) or "
            f"crashed in native code; asv's output of the run says which")


def raised(ctx: RunContext, case: str, params: dict, error: BaseException, environment) -> Record:
    """The ``failed`` record of a case whose measuring raised (not out of memory, which is
    does-not-fit): filed before the error reaches asv, which shows its traceback. A full disk
    is named as such: the case did nothing wrong, and a --resume with space measures it."""
    if disk_is_full(error):
        return Record(case=case, params=params, outcome=FAILED, reason=disk_full(ctx.path.parent, ctx.run_id),
                      check={"ended": DISK_FULL}, environment=environment, run_id=ctx.run_id, commit=ctx.commit)
    return Record(case=case, params=params, outcome=FAILED, reason=f"{type(error).__name__}: {error}"[:2000],
                  check={"ended": "raised", "error": type(error).__name__}, environment=environment,
                  run_id=ctx.run_id, commit=ctx.commit)


def file_lost(ctx: RunContext, environment) -> list[Record]:
    """A ``failed`` record, in the run's file, for each case begun in this harness run whose
    process ended without one."""
    filed = [Record(case=e["case"], params=e["params"], outcome=FAILED, environment=environment, run_id=ctx.run_id,
                    commit=ctx.commit, **why) for e, why in _why_lost(ctx)]
    for rec in filed:
        RecordStore.append(ctx.path, rec)
    return filed


def _why_lost(ctx: RunContext):
    """(begun entry, the reason and check of its failed record) of each case lost: a process that
    died while the disk it files into was full most likely died of it, and is said to have."""
    import psutil
    host, kills = psutil.virtual_memory().total, oom_kills()
    full = disk_nearly_full(ctx.path.parent)
    for e in _lost(ctx):
        if full and not oom_killed(e, kills):
            yield e, {"reason": f"its process (pid {e['pid']}) ended without a record: "
                                f"{disk_full(ctx.path.parent, ctx.run_id)}", "check": {"ended": DISK_FULL}}
        else:
            ended = "oom_killed" if oom_killed(e, kills) else "died"
            yield e, {"reason": reason(e, host, kills), "check": {"ended": ended}}


def _lost(ctx: RunContext) -> list[dict]:
    """Begun entries of this harness process's run without a record of the run, one per case,
    whose process is gone."""
    log = RecordStore.begun_log(ctx.path)
    if not ctx.run_id or not log.exists():
        return []
    recorded = [(r.case, r.params) for r in load_file(ctx.path).records if r.run_id == ctx.run_id]  # none yet: []
    lost = {}
    for _, entry in read_lines(log)[0]:
        key = (entry["case"], repr(sorted(entry["params"].items())))
        if (entry.get("harness_pid") == ctx.parent_pid and (entry["case"], entry["params"]) not in recorded
                and not _alive(entry["pid"])):
            lost.setdefault(key, entry)
    return list(lost.values())


def _alive(pid: int) -> bool:
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
