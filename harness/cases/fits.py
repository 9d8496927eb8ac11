"""What fits: the largest batch of a ``tricks`` training step under a memory budget.

Parameters: ``device`` (cuda; cpu only skips, the allocator cap being a CUDA feature),
``workload``, ``technique``, ``vocab``, ``width``, ``depth``, ``seq_len`` as in ``tricks``,
``budget`` (16GB, 24GB, 40GB, 80GB, or ``card``: the whole card) and ``over``: ``batch`` (the
largest batch of ``seq_len`` tokens, searched from 1) or ``seq_len`` (the longest single
sequence, searched from ``seq_len``; token models only), ``allocator``: the setting of torch's
CUDA allocator every probe runs under (``harness.workloads.training.allocator``: ``default``,
``expandable``, ``async``, ``gc0.6``, ``split512``; under ``async`` the cap holds the bytes in
use, not the driver pool's reserve). A budget larger than the card skips with the reason.

The one timed "step" is the whole search (``harness.workloads.search.fits``: doubling until the
sizes that fit span a factor of four, a guess on the line through their peaks, a gallop from it and
bisection, then the sizes just after the answer, one fresh process per probe; where earlier runs
searched the case, on this machine or, failing that, another (a budget caps the same bytes on every
card), the sizes they found either side of the answer are probed first and their peaks join the
line, and ``earlier_runs`` ([here, elsewhere]) and ``earlier_bracket`` say so; where this GPU
recorded the search's programmes (``python3 -m harness programmes``), the replay's answer and the
two sizes after it are probed first instead, and ``prediction`` says ``"by": "replay"``; where the
GPU fails that answer, the next size under it the replay runs is the search's first guess, kept as
its ``then``); its time says what the search cost, nothing about training. The answer is in the
check: ``max_batch``, the largest batch that fits, with the two after it seen not to
(``fits.largest_fitting``), ``failed_below`` (the smaller sizes the search saw fail all the same:
fitting was not monotone there; absent from records filed before), the probes it took, the budget in
bytes, the peak the probe at the answer allocated, ``search_limit`` (an answer there is a lower
bound: the search stops at it), ``too_slow_at`` (the size whose probe ran past ``probe_timeout_s``,
where the search stopped: its answer too is a lower bound, more may fit in memory),
``host_killed_at`` (the smallest size whose probe the kernel killed when host memory ran out),
``host_short_at`` (the smallest size the host's memory could not hold: killed, or stopped by the
guard of a way out that keeps data on the host; where it is the size after the answer, the host, not
the budget, set the answer: ``host_bound``), and ``budget_bytes_per_sample`` (budget / max_batch) or
``budget_bytes_per_token`` (budget / max_seq_len), the figure asv tracks because bigger is worse
there. One sequence is searched in steps of ``search_unit`` (128) tokens, a batch sample by sample.
When even the smallest size does not fit, the case does not fit.
"""
from __future__ import annotations

from harness.workloads.search import fits, predict, probe_log, replayed
from harness.measure.guards import preloaded
from harness.measure.guards.budget import BUDGETS, ENFORCED, is_whole_card, resolve
from harness.measure.guards.workingset import host_available, host_share
from harness.measure.outcomes import DOES_NOT_FIT, OK, CheckFailed, DoesNotFit, Skip
from harness.measure.instruments.machine import machine_name, named_gpus
from harness.measure.records.store import COMMITTED, RecordStore
from harness.cases.base import Case, Config
from harness.measure.workload import Workload
from harness.workloads.training.tricks import (DEPTHS, DEVICES, IMAGE_MODELS, SEQ_LENS, TECHNIQUES, TOKEN_MODELS,
                                               VOCABS, WIDTHS, WORKLOADS)
from harness.workloads.training.ways import applies, parse, runnable
from harness.workloads.training import allocator as settings

NAME = "fits"
SEARCHED = "tricks"  # the case whose step the search probes, found in the registry when a search runs
PROGRAMMES = COMMITTED  # where this GPU's recorded programmes are (``python3 -m harness programmes``)
# The tricks case's shapes, from where it declares them too.
PARAMS = {"device": DEVICES, "workload": WORKLOADS, "technique": TECHNIQUES, "budget": BUDGETS, "over": fits.OVER,
          "allocator": tuple(settings.TORCH), "vocab": VOCABS, "width": WIDTHS, "depth": DEPTHS, "seq_len": SEQ_LENS}


def _card(devices) -> tuple[int, int]:
    """(total, free) bytes of CUDA device 0 (the card CUDA_VISIBLE_DEVICES selects). From NVML,
    not torch: this process must not create a CUDA context, which would take device memory from
    the probes beside it."""
    from harness.measure.guards.requirements import need_gpus
    from harness.measure.guards.workingset import card
    gpu = card(need_gpus(1, devices))
    return gpu.memory_total, gpu.memory_free


def _probe_log(run_file) -> probe_log.ProbeLog:
    """Beside the run's records. Outside a ``harness run`` each search has a log of its own, in
    memory, and knows nothing earlier."""
    return probe_log.ProbeLog(RecordStore.probe_log(run_file) if run_file else None)


def _answer(case: str, check: dict, key: str | None) -> int | None:
    """A what-fits record's answer ``check[key]`` (``max_batch``, ``max_seq_len``); None for any
    other case or key, or where the search found none."""
    return check.get(key) if case == NAME and key and key.startswith("max_") else None


def lower_bound(case: str, check: dict, key: str | None) -> bool:
    """Whether a record's answer ``check[key]`` (``max_batch``, ``max_seq_len``) is where a what-fits
    search stopped (at its limit, or before a probe too slow to wait for), so that more may fit;
    False for any other case or key. Records filed before
    the check held ``search_limit`` searched up to ``fits.LIMIT`` along either axis."""
    n = _answer(case, check, key)
    return n is not None and (check.get("too_slow_at") is not None or n == check.get("search_limit", fits.LIMIT))


def not_monotone(case: str, check: dict, key: str | None) -> str | None:
    """Where a record's search saw sizes under its answer ``check[key]`` fail, which ("22 did
    not fit"); None where it saw none, and for records filed before ``failed_below`` was kept."""
    failed = check.get("failed_below") if _answer(case, check, key) is not None else None
    return f"{', '.join(f'{m:,}' for m in failed)} did not fit" if failed else None


def search_unit(check: dict, over: str) -> int:
    """The step a search went up by along ``over``: as its record keeps it, or for a record filed
    before it kept one, its axis's (a sequence was searched in whole blocks then too)."""
    return check.get("search_unit") or fits.UNITS[over]


def host_bound(case: str, check: dict, key: str | None) -> bool:
    """Whether the host's memory, not the budget, set a record's answer ``check[key]``: the size
    after it is one the host could not hold. A host with more memory may fit more."""
    n, short = _answer(case, check, key), check.get("host_short_at")
    return n is not None and short is not None and short <= n + search_unit(check, key.removeprefix("max_"))


def _over(record) -> str:
    """The axis a what-fits record searched; records filed before ``over`` searched the batch."""
    return record.params.get("over", "batch")


def stopped_short(record) -> bool:
    """Whether a record's search stopped at a limit lower than today's for its axis (a sequence
    searched up to the batch's ``LIMIT`` before ``LIMITS`` let it go further): its answer is a
    lower bound that today's search would raise, so ``harness todo`` lists it again."""
    over, check = _over(record), record.check
    return (lower_bound(NAME, check, f"max_{over}") and check.get("too_slow_at") is None
            and check.get("search_limit", fits.LIMIT) < fits.LIMITS.get(over, fits.LIMIT))


def capped_short(record) -> bool:
    """Whether a search's probes capped torch short of its budget: before the cap was a fraction
    of torch's own total it was one of NVML's, a few hundred MB under the budget, by a different
    amount on each card. Its answer may be one size under today's, so ``harness todo`` lists it
    again. The whole card was never capped, a search that did not run capped nothing, and an
    answer the host's memory set (``host_bound``) is today's too: a larger cap on the device
    leaves the host's share as it was."""
    return (record.outcome in (OK, DOES_NOT_FIT) and not exact_cap(record)
            and not host_bound(NAME, record.check, f"max_{_over(record)}"))


def exact_cap(record) -> bool:
    """Whether a search's probes ran under its budget's own bytes: the whole card (never capped),
    or a cap that is a fraction of torch's total (``capped_short`` says why not of NVML's)."""
    return is_whole_card(record.params.get("budget")) or record.budget.get("enforced") == ENFORCED["torch"]


def old_cap(record, key: str | None) -> bool:
    """Whether ``key`` is a what-fits answer its search found under the old, short cap."""
    return _answer(record.case, record.check, key) is not None and capped_short(record)


def before_the_rule(record) -> bool:
    """Whether a search answered before an answer needed the ``CONFIRM_ABOVE`` sizes after it seen
    not to fit (its record keeps no ``failed_below``): where fitting is not monotone near the top,
    such an answer is the top of whichever run of fitting sizes its path met, and today's search may
    answer past it, so ``harness todo`` lists it again. Not an answer the host's memory set, nor one
    where the search stopped at a limit: probes past them change nothing."""
    over = f"max_{_over(record)}"
    return (record.outcome == OK and _answer(NAME, record.check, over) is not None
            and "failed_below" not in record.check and not host_bound(NAME, record.check, over)
            and not lower_bound(NAME, record.check, over))


def before_rule(record, key: str | None) -> bool:
    """Whether ``key`` is a what-fits answer its search found before today's rule (``before_the_rule``)."""
    return _answer(record.case, record.check, key) is not None and before_the_rule(record)


def outdated(record) -> bool:
    return stopped_short(record) or capped_short(record) or before_the_rule(record)


def probe_config(search: dict) -> Config:
    """The probes' own config: the ``tricks`` step the search starts from, one sequence of
    ``seq_len`` tokens (batch 1, no accumulation), on the whole card (the probe caps its allocator
    at the search's budget itself); a probe of size n grows it along ``over``."""
    return Config.of(SEARCHED, dict(search, batch=1, micro_batch=1, budget="card"))


def _replayed(rec, cap: int, over: str, limit: int, host_limit: int | None) -> dict:
    """The replay's answer under ``cap`` (and the host's share, where the way keeps what it saves
    there), as the record keeps a prediction."""
    return {"by": "replay", "largest": replayed.largest(rec, cap, fits.UNITS[over], limit, host_limit),
            "recorded_sizes": sorted(rec.programmes), "recorded_at": sorted(rec.commits)}


def _under_failed_aim(replay, answers: dict, cap: int, over: str, prediction: dict) -> int | None:
    """Where the GPU failed the replay's answer (``prediction``'s largest): the next size under it
    that the replay runs, above every size known to fit under it (``replayed.runs_below``), kept
    in the prediction as ``then``. Where the GPU does not fit monotonically, the replay, which packs
    the blocks as the allocator does, names where a fit past a run of failing sizes may lie, while a
    search from under them (doubling, the law's guess, bisection) answers the top of whichever run it
    meets first. None where there is no replay, its answer fit or is not yet probed, or this was
    asked once."""
    aim = prediction.get("largest")
    if replay is None or not aim or "then" in prediction or answers.get(aim) is not False:
        return None
    above = max((n for n, ok in answers.items() if ok and n < aim), default=0)
    prediction["then"] = replayed.runs_below(replay, cap, fits.UNITS[over], above, aim)
    return prediction["then"]


def search_key(params: dict, over: str, allocator: str) -> dict:
    """What a search's probes are logged under: its parameters and axis, and the allocator
    setting where it is not the default (so that logs from before the setting was a parameter
    still bound and aim the default's searches)."""
    return dict(params, over=over, **({} if allocator == "default" else {"allocator": allocator}))


def build(device, workload, technique, budget, over, allocator, vocab, width, depth, seq_len,
          run_file=None) -> Workload:
    if device != "cuda":
        raise Skip("what fits needs a CUDA device: the budget is enforced by "
                   "torch.cuda.set_per_process_memory_fraction; run it with device=cuda on a GPU box")
    way = parse(technique)  # once: what applies and how many probes run side by side are the Way's
    applies(way, workload, IMAGE_MODELS, TOKEN_MODELS)
    runnable(way, device)  # a knob's missing package skips before the search, not in every probe
    if over == "seq_len" and workload == "resnet50":
        raise Skip("over=seq_len applies to the token models (lm, encdec), not resnet50")
    from harness.measure.instruments.devices import discover
    devices = discover()
    total, free = _card(devices)
    capped = resolve(budget, total, "torch")  # each probe caps torch's allocator at its bytes
    cap = capped.limit_bytes
    params = dict(device=device, workload=workload, technique=technique, vocab=vocab, width=width,
                  depth=depth, seq_len=seq_len)
    log, key = _probe_log(run_file), search_key(params, over, allocator)
    earlier = probe_log.EarlierRuns(*RecordStore.earlier_probe_logs(run_file)) if run_file else probe_log.EarlierRuns()
    hint = earlier.bracket(key, cap)  # the earlier logs are read once, here: it holds for the whole search
    if hint == (None, None) and allocator != "default":
        # Never searched under this setting: the default's answer aims the first probes (a setting
        # moves it by a few sizes at most); only this run's probes decide the answer, as ever.
        hint = earlier.bracket(search_key(params, over, "default"), cap)
    # Each probe is a fresh process: the allocator setting is in its environment from its start,
    # where the server it is forked from imports torch. The way's own setting wins, as it would in
    # the probe (which puts it in force before torch starts, where it is not yet).
    env = settings.environ_with(way.allocator if way.allocator != "default" else allocator, fits.probe_env())
    prober = fits.SubprocessProber(fits.probe_argv(probe_config(params), cap, over), env=env,
                                   timeout_s=fits.PROBE_TIMEOUT_S, on_result=lambda result: log.add(key, cap, result))
    start, limit = (1 if over == "batch" else seq_len), fits.LIMITS[over]
    found = {}
    # Probes of a technique that grows in host memory run one at a time: side by side, each would
    # take the host's share its guard allows, and together they would run the host out.
    width = 1 if way.grows_on_host else fits.side_by_side(cap, free)
    # The host's share such a way's guard allows one forward (``offload.saving``), read here as each
    # of its probes, one at a time, reads it: the replay's bound on the host, as the cap's on the card.
    host_limit = host_share(host_available()) if way.grows_on_host else None

    aim = hint
    replay = replayed.for_search(PROGRAMMES, machine_name(devices), named_gpus(devices), key) if devices.gpus else None
    if replay is not None:
        # The replay's answer is probed first, with the sizes after it, which is the whole of the
        # rule's proof where it is right; before an earlier run's bracket too: where fitting is not
        # monotone, a search from under a run of failing sizes stops at the top of the run of fits
        # it met first, and the replay, which packs the blocks as the allocator does, names the
        # last. The replay says the size after its answer fails, as a bracket does: one probe at a
        # time, that is the next probe, not a doubling from the answer.
        found["prediction"] = _replayed(replay, cap, over, limit, host_limit)
        largest = found["prediction"]["largest"]
        aim = (largest, largest + fits.UNITS[over]) if largest else (None, None)

    def estimate():
        """The predicted largest size from the probes so far (this run's and earlier runs'; the
        device and host this run's alone); the first one made is kept for the record, beside the
        answer it aimed at, where the replay's is not. Where the GPU failed the replay's answer,
        first (once) the next size under it that the replay runs."""
        again = _under_failed_aim(replay, log.answers(key, cap), cap, over, found.get("prediction", {}))
        if again is not None:
            return again
        here = log.entries(key)
        made = predict.prediction(here + earlier.entries(key), cap, over, fits.UNITS[over], limit, here=here)
        if made is None:
            return None
        if "prediction" not in found:
            contexts = [e["context_bytes"] for e in here if e.get("context_bytes")]
            found["prediction"] = dict(made.law.to_dict(made.reach, fits.UNITS[over], limit), largest=made.largest,
                                       reachable_bytes=made.reach, allocated_bound=made.bound,
                                       rounding_among=list(made.among),
                                       budgets=predict.budgets(
                                           made.law, total, max(contexts, default=None), fits.UNITS[over], limit))
        return made.largest

    def step():
        found["known"] = log.bounds(key, cap)
        with preloaded.cases():  # each probe forked with torch imported already
            search = found["search"] = fits.largest_fitting(
                prober, start=start, limit=limit, known=log.answers(key, cap),
                probe_many=prober.many if width > 1 else None,
                estimate=estimate, unit=fits.UNITS[over], confirm=True,
                hint=aim,
                slow=log.too_slow(key))  # known under any budget: time does not depend on it
        if search.largest == 0 and search.too_slow:
            raise CheckFailed(f"no answer: the first probe, at {over} {start}, ran past {prober.timeout_s:g} s",
                              {"too_slow_at": search.too_slow, "probe_timeout_s": prober.timeout_s})
        if search.largest == 0:
            raise DoesNotFit(f"does not fit: {over} {start} of {workload} with {technique} under {budget}", cap)

    def check():
        n = found["search"].largest
        at_max = next((r for r in reversed(log.entries(key)) if r["n"] == n and r["fits"]), {})
        per = "budget_bytes_per_sample" if over == "batch" else "budget_bytes_per_token"
        return {f"max_{over}": n, "probes": found["search"].probes, "budget_bytes": cap, "card_bytes": total,
                "peak_allocated_at_max": at_max.get("peak_allocated"), per: cap / n, "search_limit": limit,
                "failed_below": found["search"].failed_below,
                "search_unit": fits.UNITS[over],
                "too_slow_at": found["search"].too_slow, "probe_timeout_s": prober.timeout_s,
                "host_killed_at": log.host_killed(key), "host_short_at": log.host_short(key),
                **({"host_limit_bytes": host_limit} if host_limit is not None else {}),
                "probe_pids": len({r["pid"] for r in prober.results}),
                "side_by_side": width, "known_fit": found["known"][0], "known_not_fit": found["known"][1],
                "earlier_runs": earlier.runs(key), "earlier_bracket": list(hint),
                "allocator_backends": sorted({str(r.get("allocator_backend")) for r in prober.results}),
                "probe_seconds": [r["seconds"] for r in prober.results],
                **({"prediction": found["prediction"]} if "prediction" in found else {})}

    # No gpus: the probes hold the GPU work in processes of their own, so there is nothing here for
    # the busy reading to profile (and it would run the search again to try).
    return Workload(step=step, check=check, work={}, warmup=0, repeat=1, budget=capped)


CASE = Case(name=NAME, params=PARAMS, build=build, doc=__doc__, keeps_files=True, gpu_work_elsewhere=True,
            allocator=lambda **_: "torch", outdated=outdated, earlier={"allocator": "default"})
