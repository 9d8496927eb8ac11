"""``python3 -m harness try TARGET``: what fits each card, at what speed, for a model the user brings.

Three steps, each case in a fresh process (forked from a server with torch imported once:
``harness.measure.guards.preloaded``) through the machinery ``run`` uses (``bench.measure``: the
same records, the same writer, each record flushed as it comes, the run's folder locked, the GPU
locked while cases run on it):

1. every way (``--ways``; by default ``user_model.default_ways``) trains the model at ``--batch``
   on the whole card, fp32 first, each way's loss held to fp32's curve;
2. per card (``--card``), the fastest way whose peak at that batch stays under the card's total
   runs again under the card's emulation (``budget``: torch's allocator capped at what the card
   leaves once this process's CUDA context is charged); where it does not fit, the next;
3. where no way fits the batch on a card, the largest batch the leanest way fits there: first the
   predictor's (``harness.workloads.search.predict``, from batches 1 and 2), said at once, then the
   what-fits search (``harness.workloads.search.fits.largest_fitting``) from it, each probe a case.

Then one answer per card, answer first, and a table of the ways. Before any of it the target is
built and its loss run on torch's meta device: a target that cannot train is refused in one line.
"""
from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

from harness.measure.guards.inputs import Refused
from harness.measure.workload import BENCHMARK_TIMEOUT_S

CASE = "try"
PEAK = "allocator.torch.max_allocated.cuda:0"
RESERVED = "allocator.torch.max_reserved.cuda:0"  # what the allocator's cap binds: the predictor reads it
# The batches probed first where no way fits the batch: two sizes give the predictor its line.
FIRST_PROBES = (1, 2)
# One case: a model built, seven steps and fp32's reference where its record has none; asv gives a
# benchmark as long.
CASE_TIMEOUT_S = BENCHMARK_TIMEOUT_S


# ---- the command line ------------------------------------------------------------------------

def add_parser(sub) -> None:
    from harness.measure.guards.budget import CARDS
    t = sub.add_parser("try", help="what fits each card at what speed, for a model you bring (or a built-in one)")
    t.add_argument("target", help="path/to/file.py:factory, package.module:factory or a built-in name "
                                  "(llama-1b, llama-3b, gpt2-medium, bert-large, vit-l16)")
    t.add_argument("--batch", type=int, default=1, help="the batch to train (default 1)")
    t.add_argument("--seq-len", type=int, default=0, help="the factory's seq_len (default: its own)")
    t.add_argument("--card", nargs="+", default=["p100-16gb", "rtx4090-24gb", "l4-24gb", "a100-40gb", "h100-80gb"],
                   metavar="NAME", help=f"the cards to answer for, of: {', '.join(CARDS)}")
    t.add_argument("--ways", help="comma-separated ways out (e.g. fp32,bf16_autocast+checkpoint) and groups: "
                                  "'default' (the ways that save memory, alone and with checkpointing: what runs "
                                  "unless told), 'all' (every precision, with checkpointing, with either offload), "
                                  "'newer' (each optimizer, lora, qlora, attention, compile and chunked_loss knob "
                                  "alone and on bf16_autocast+checkpoint, those the model takes)")
    t.add_argument("--results", metavar="DIR", help="file the records into DIR (default .asv/results)")
    t.add_argument("--file", action="store_true", help="file the records into results/ (for committing)")
    t.set_defaults(func=main)


def refusal(args) -> str | None:
    """What is wrong with the arguments, one line naming the fix; None where nothing is."""
    from harness.measure.guards.budget import CARDS
    from harness.measure.guards.inputs import writable_folder
    from harness.workloads.training import user_model
    if args.batch < 1:
        return f"--batch takes a whole number from 1, got {args.batch}"
    if args.seq_len < 0:
        return f"--seq-len takes a whole number of tokens (0: the factory's own), got {args.seq_len}"
    unknown = [c for c in args.card if c not in CARDS]
    if unknown:
        return f"--card {unknown[0]} is no card the suite emulates: pass some of {', '.join(CARDS)}"
    if args.results is not None and args.file:
        return "--file and --results both say where records go: give one of them"
    try:
        for way in chosen_ways(args, "cuda"):
            problem = user_model.refused_knobs(way)
            if problem:
                return f"--ways: {problem}"
    except ValueError as e:
        return f"--ways: {e}"
    writable_folder(results_of(args), "the results folder")
    return None


def groups() -> dict:
    """The names ``--ways`` takes for a list of ways, each a function of the device."""
    from harness.workloads.training import user_model
    return {"default": user_model.default_ways, "all": user_model.every_way, "newer": user_model.newer_ways}


def items(args) -> list[str]:
    """What ``--ways`` lists, ways and group names, in its order; none where it is not given."""
    return [w.strip() for w in (args.ways or "").split(",") if w.strip()]


def chosen_ways(args, device: str) -> list:
    """The ``Way``s ``--ways`` asks for on ``device``, each parsed here once (ValueError naming the
    fix for one that is not a way); fp32 first: every way's loss is held to its curve."""
    from harness.workloads.training import ways
    named = groups()
    listed = [w for item in items(args) or ["default"] for w in (named[item](device) if item in named else [item])]
    return list(dict.fromkeys(map(ways.parse, ["fp32", *listed])))


def asked_by_name(args) -> list:
    """The ``Way``s ``--ways`` names one by one (not through a group): a model that cannot take one
    of them is refused, where a group's are left out, said."""
    from harness.workloads.training import ways
    named = groups()
    return [ways.parse(w) for w in items(args) if w not in named]


def results_of(args) -> Path:
    from harness.measure.records.store import COMMITTED, LOCAL
    return Path(args.results) if args.results is not None else COMMITTED if args.file else LOCAL


def main(args) -> int:
    from harness.workloads.training import user_model
    try:
        problem = refusal(args)
        if problem is None:
            seen = user_model.preflight(args.target, args.batch, args.seq_len,
                                        list(dict.fromkeys(chosen_ways(args, "cuda") + chosen_ways(args, "cpu"))))
            named = [w.name for w in asked_by_name(args) if w.name in seen["refused"]]
            if named:
                problem = f"--ways {named[0]}: {args.target}: {seen['refused'][named[0]]}"
    except (Refused, ValueError) as e:  # TargetError is a ValueError
        problem = str(e)
    if problem:
        print(f"oombench try: {problem}", file=sys.stderr)
        return 2
    return Try(args, seen).run()


# ---- the run ---------------------------------------------------------------------------------

class Try:
    def __init__(self, args, seen: dict):
        from harness.measure.instruments.devices import discover
        self.args, self.seen = args, seen
        self.devices = discover()
        self.device = "cuda" if self.devices.gpus else "cpu"
        chosen, refused = chosen_ways(args, self.device), seen.get("refused", {})
        self.left_out = {w.name: refused[w.name] for w in chosen if w.name in refused}
        self.ways = [w for w in chosen if w.name not in self.left_out]  # each a Way
        self.processes = 0

    def params(self, technique: str, budget: str = "card", batch: int | None = None) -> dict:
        return {"device": self.device, "target": self.args.target, "technique": technique, "budget": budget,
                "batch": self.args.batch if batch is None else batch, "seq_len": self.args.seq_len}

    def run(self) -> int:
        from harness.measure.guards import locks, preloaded
        from harness.measure.records.store import RecordStore
        results = results_of(self.args)
        print(self.cost(), flush=True)
        for way, why in self.left_out.items():
            print(f"  {way}: left out, {why}", flush=True)
        began = time.monotonic()
        with locks.held(locks.results_lock(results), f"results folder {results}"):
            ctx = self.context(RecordStore.of_results(results))
            print(f"oombench try: run {ctx.run_id}, records in {ctx.path}", flush=True)
            with self.gpu_held(), preloaded.cases():  # each case forked with torch imported already
                ways = {}
                for way in self.ways:
                    if self.needless(way, ways):
                        print(f"  {way.name}: not run, every card has a faster way whose peak fits it", flush=True)
                        continue
                    ways[way.name] = self.case(ctx, self.params(way.name))
                    if way.name == "fp32" and ways[way.name].outcome == "failed":
                        # fp32 itself does not train (a NaN loss, a model that raises): no way out would
                        print(f"oombench try: {self.args.target}: {ways[way.name].reason}; fix the model or its loss "
                              "(records kept)", file=sys.stderr)
                        return 1
                answers = {card: self.answer(ctx, card, ways) for card in self.args.card}
        for card in self.args.card:
            print(answers[card])
        print()
        print(self.table(ways))
        print(f"\noombench try: {self.processes} processes in {time.monotonic() - began:.0f} s (wall, the set-up of "
              f"each included); records in {ctx.path}")
        return 0 if any(r.ok for r in ways.values()) else 1

    def needless(self, way, ran: dict) -> bool:
        """Whether ``way`` (a ``Way``) is a last resort (CPU offload, by default: the slowest way there is) that
        no card needs: each has a way already run (that it can run) whose peak fits it, or cannot run
        ``way`` either. Ways asked for by name or through ``all`` always run; the default group's
        (named or not) and ``newer``'s are last resorts."""
        from harness.measure.guards.budget import CARDS
        if way in asked_by_name(self.args) or "all" in items(self.args) or way.offload != "cpu_offload":
            return False
        # a card that cannot run the last resort itself (a P100 and bf16 parameters) does not ask for it
        return all(CARDS[c].lacks(way.capability)
                   or any(r.ok and peak(r) is not None and peak(r) <= CARDS[c].total_bytes for r in runnable(ran, c))
                   for c in self.args.card)

    def cost(self) -> str:
        from harness.cases.try_model import REPEAT, WARMUP
        n, cards = len(self.ways), len(self.args.card)
        steps = WARMUP + REPEAT
        return (f"oombench try {self.args.target} ({self.seen['parameters'] / 1e6:,.1f} M parameters, "
                f"{self.seen['blocks']} blocks to recompute, checked {self.seen['checked']}) at batch "
                f"{self.args.batch} on {self.device}: {n} ways on the whole card, then {cards} cards under emulation: "
                f"{n + cards} processes of {steps} steps "
                f"(each way's fp32 curve comes from fp32's own record), fewer where no card needs CPU offload, more "
                f"where a card fits no way at batch {self.args.batch} (a what-fits search); "
                f"{self.priced(n + cards, steps)}")

    def priced(self, processes: int, steps: int) -> str:
        """The device time of ``processes`` cases from this target's earlier records on this machine."""
        earlier = [r for r in self.earlier() if r.ok and r.params.get("batch") == self.args.batch]
        if not earlier:
            return "no earlier record of this target at this batch here to price the steps by"
        step = sorted(r.timing.median_s for r in earlier)[len(earlier) // 2]
        return f"about {processes * steps * step:,.0f} s of steps (the median step of {len(earlier)} earlier records)"

    def earlier(self) -> list:
        from harness.measure.records.store import RecordStore
        try:
            records = RecordStore.of_results(results_of(self.args)).load().records
        except Exception:
            return []
        return [r for r in records if r.case == CASE and r.params.get("target") == self.args.target
                and r.params.get("device") == self.device]

    def context(self, store):
        from harness.drive.asv.suite import head_commit
        from harness.measure.instruments.environment import snapshot
        from harness.measure.instruments.machine import machine_info
        from harness.measure.records.store import RunContext
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        ctx = RunContext(store, machine_info(snapshot(self.devices))["machine"], run_id, head_commit(),
                         parent_pid=os.getpid())
        ctx.path.parent.mkdir(parents=True, exist_ok=True)
        ctx.path.touch()
        store.claim(ctx.path, {"try": self.args.target, "batch": self.args.batch, "seq_len": self.args.seq_len,
                               "cards": list(self.args.card), "ways": [w.name for w in self.ways]})
        return ctx

    def gpu_held(self):
        import contextlib

        from harness.measure.guards import locks
        if self.device != "cuda":
            return contextlib.nullcontext()
        return locks.gpus_held(locks.visible_gpu_uuids([0]))

    def case(self, ctx, params: dict):
        """The record of one case, measured in a fresh process (``measure_one``) and read back."""
        from harness.drive.asv.bench import RUN_ENV
        from harness.measure.guards import preloaded
        from harness.measure.guards.lifeline import PARENT_ENV
        from harness.measure.records.store import REPO, load_file
        env = dict(os.environ, **{RUN_ENV: ctx.to_json(), PARENT_ENV: str(os.getpid())})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self.processes += 1
        if preloaded.run([sys.executable, "-m", __name__, json.dumps(params)], env, CASE_TIMEOUT_S).timed_out:
            raise SystemExit(f"oombench try: the case {params} ran past {CASE_TIMEOUT_S} s and was ended; the records "
                             f"so far are in {ctx.path}")
        mine = [r for r in load_file(ctx.path).records if r.case == CASE and r.params == params]
        if not mine:
            raise SystemExit(f"oombench try: the case {params} filed no record: run `python3 -m harness case try "
                             f"{' '.join(f'{k}={v}' for k, v in params.items())}` to see why")
        record = mine[-1]
        print(f"  {params['technique']} under {params['budget']} at batch {params['batch']}: {line(record)}",
              flush=True)
        return record

    # ---- per card ----------------------------------------------------------------------------

    def answer(self, ctx, card: str, ways: dict) -> str:
        from harness.measure.guards.budget import CARDS
        total = CARDS[card].total_bytes
        ran = [r for r in runnable(ways, card) if r.ok]
        if not ran:
            return f"{card}: no way it can run trained {self.args.target} at batch {self.args.batch}; see the table"
        fastest = sorted(ran, key=lambda r: r.timing.median_s)
        fitting = [r for r in fastest if peak(r) is None or peak(r) <= total]
        for r in fitting[:2]:  # a peak under the card may still not fit beside its context: then the next
            under = self.case(ctx, self.params(r.params["technique"], card))
            if under.outcome == "skipped":
                why = under.reason.split(":")[0]
                return f"{card}: not emulated on this {self.device} ({why}); fastest here {said(r)}"
            if under.ok:
                return f"{card}: {said(under, of=total)}{self.plain(under, ways.get('fp32'), total)}{unfit(ways, card)}"
        return self.searched(ctx, card, ran, total) + unfit(ways, card)

    def plain(self, answer, fp32, total: int) -> str:
        """What fp32 (no way out) does on the card at the batch, beside the answer."""
        if answer.params["technique"] == "fp32":
            return "; no way out needed"
        if fp32 is None or not fp32.ok or peak(fp32) is None:
            return ""
        return f"; fp32 peaks at {gb(peak(fp32))} at batch {self.args.batch}, over the card's {gb(total)}" \
            if peak(fp32) > total else ""

    def searched(self, ctx, card: str, ran: list, total: int) -> str:
        """No way fits the batch: the largest batch the leanest way fits on ``card``. Its first answer
        is the predictor's (``harness.workloads.search.predict``: the law through the peaks at batches
        1 and 2, two probes of seconds), said as soon as it is known; the search then starts from it
        and confirms it (the rule's answer, whatever the prediction said)."""
        from harness.workloads.search.fits import largest_fitting
        leanest = min(ran, key=lambda r: peak(r) or 0)
        way = leanest.params["technique"]
        found = {}

        def probe(n: int) -> bool:  # a question of memory: a probe that trained fits, whatever its loss check said
            found[n] = self.case(ctx, self.params(way, card, n))
            return found[n].outcome in ("ok", "failed")

        batch = self.args.batch
        known = {n: probe(n) for n in FIRST_PROBES if n < batch}
        guess = self.predicted(card, way, found, total, batch - 1) if known.get(1) else None
        search = largest_fitting(probe, start=1, limit=batch - 1, known=known, confirm=True,
                                 estimate=None if guess is None else lambda: guess) if batch > 1 else None
        if search is None or search.largest == 0:
            return (f"{card}: does not fit at batch 1 under any way on a {gb(total)} card: smallest peak "
                    f"{gb(peak(leanest))} with {way}" + (f" at batch {batch}" if batch > 1 else ""))
        best = found[search.largest]
        told = "" if guess is None else f"; predicted {guess} from batches {' and '.join(map(str, FIRST_PROBES))}"
        return f"{card}: no way fits batch {batch}; {said(best, of=total)} (the largest batch {way} fits{told})"

    def predicted(self, card: str, way: str, found: dict, total: int, limit: int) -> int | None:
        """The largest batch the predictor gives ``way`` under ``card`` from the probes ``found``
        (batch -> record), said at once; None, said, where the probes carry no prediction."""
        from harness.workloads.search import predict
        results = [{"n": n, "fits": r.outcome in ("ok", "failed"), "peak_allocated": peak(r),
                    "peak_reserved": r.memory.get(RESERVED) or peak(r)} for n, r in found.items()]
        # what the probes' allocator was capped at under the card (its total less the context), else its total
        cap = next((r.budget["limit_bytes"] for r in found.values() if (r.budget or {}).get("limit_bytes")), total)
        try:
            made = predict.prediction(results, cap, "batch", 1, limit, strict=True)
        except predict.Refused as e:
            print(f"  {card}: no prediction for {way} ({e}); searching", flush=True)
            return None
        print(f"  {card}: predicted, {way} fits batch {made.largest} (the law through batches "
              f"{' and '.join(map(str, sorted(found)))}); confirming", flush=True)
        return made.largest

    def table(self, ways: dict) -> str:
        from tabulate import tabulate
        from harness.measure.guards.budget import CARDS
        from harness.workloads.training.ways import parse
        rows = []
        for way, r in ways.items():
            fits = [("cannot run" if CARDS[c].lacks(parse(way).capability) else "-" if peak(r) is None
                     else "yes" if peak(r) <= CARDS[c].total_bytes else "no") for c in self.args.card]
            rows.append([way, r.outcome, ms(r), gb(peak(r)) if peak(r) is not None else "-", loss(r), *fits])
        head = ["way", "outcome", "step", "peak", "loss (gap to fp32)", *(f"peak under {c}" for c in self.args.card)]
        return tabulate(rows, headers=head, tablefmt="github")


# ---- what a card can run -----------------------------------------------------------------------

def runnable(ways: dict, card: str) -> list:
    """The records of ``ways`` (way -> record) whose way card ``card`` can run: a P100 runs no bf16."""
    from harness.measure.guards.budget import CARDS
    from harness.workloads.training.ways import parse
    return [r for way, r in ways.items() if not CARDS[card].lacks(parse(way).capability)]


def unfit(ways: dict, card: str) -> str:
    """The ways tried that ``card`` cannot run, said after its answer ("" where it runs them all)."""
    from harness.measure.guards.budget import CARDS, dotted
    from harness.report.capable import by_need
    from harness.workloads.training.ways import parse
    c = CARDS[card]
    left = [(w, parse(w).capability) for w in ways if c.lacks(parse(w).capability)]
    if not left:
        return ""
    needs = "; ".join(f"{', '.join(ws)} need {dotted(n)}" for n, ws in by_need(left))
    return f" (not offered on a {c.model}, of compute capability {dotted(c.capability)}: {needs})"


# ---- how a record is said ----------------------------------------------------------------------

def peak(record) -> int | None:
    return record.memory.get(PEAK)


def gb(n) -> str:
    from harness.units import gb as written
    return written(n)


def ms(record) -> str:
    from harness.units import ms as written
    return written(record.timing.median_s) if record.timing is not None else "-"


def loss(record) -> str:
    last, gap = record.check.get("loss_last"), record.check.get("deviation")
    if last is None:
        return "-"
    return f"{last:.4g}" + (f" ({gap:.2g})" if gap is not None else "")


def said(record, of: int | None = None) -> str:
    """"bf16_autocast+checkpoint, batch 16, 212 ms a step, 14.2 GB of 24.2 GB"."""
    p = record.params
    memory = f", {gb(peak(record))}" + (f" of {gb(of)}" if of else "") if peak(record) is not None else ""
    return f"{p['technique']}, batch {p['batch']}, {ms(record)} a step{memory}"


def line(record) -> str:
    if record.ok:
        return said(record)
    return f"{record.outcome}: {record.reason}"


# ---- one case, in its own process ------------------------------------------------------------

def measure_one(argv=None) -> int:
    """``python -m harness.drive.commands.tryout PARAMS_JSON``: the case measured here, its record
    filed into the run ``OOMBENCH_RUN`` names, by the writer every run's cases use."""
    from harness.drive.asv import bench
    from harness.measure.guards import lifeline
    lifeline.bind(lifeline.parent_from_env())
    params = json.loads((sys.argv[1:] if argv is None else argv)[0])
    try:
        bench.measure(CASE, **params)
    except (NotImplementedError, RuntimeError):
        pass  # skipped, did not fit or failed: the record says which, and why
    return 0


if __name__ == "__main__":
    sys.exit(measure_one())
