"""``python3 -m harness mutate [MODULE ...]``: how many wrong versions of the code that writes a
published figure or verdict its tests catch.

mutmut changes one thing at a time in one module (a ``<`` to ``<=``, a constant, a dropped
argument) and runs that module's tests against each change: a mutant that every test passes
is a wrong number nobody would notice. Each module is tested against only the fast test files
that cover it (TESTS), so a whole run takes minutes. Each module works in its own folder
under .mutmut/ (mutmut's copy of the code and its results), where the last run's mutants stay
to read: ``python3 -m mutmut show NAME`` in that folder.

A mutant that no test can kill, because it computes the same thing, is marked in the code with
``# pragma: no mutate`` and a reason.
"""
from __future__ import annotations

import configparser
import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.drive.commands.bootstrap import REPO

# Each module's fast tests: the files that check its figures by value. Files that launch
# processes or a browser stay out: each mutant reruns the ones that reach its function.
TESTS = {
    "harness/measure/instruments/timing.py": ("tests/test_timing.py",),
    # the peaks it reads
    "harness/measure/instruments/memory.py": ("tests/test_memory.py", "tests/test_fragmentation.py"),
    "harness/measure/guards/budget.py": ("tests/test_budget.py",),
    "harness/report/gate.py": ("tests/test_gate.py", "tests/test_gate_closed.py", "tests/test_gate_rows.py",
                               "tests/test_gate_rounds.py"),
    "harness/report/noise.py": ("tests/test_noise_floors.py", "tests/test_gate_rounds.py"),
    "harness/report/rounds.py": ("tests/test_rounds.py", "tests/test_gate_rounds.py"),
    "harness/report/compares.py": ("tests/test_compares.py",),
    "harness/report/efficiency.py": ("tests/test_efficiency.py",),
    "harness/report/tables.py": ("tests/test_tables.py", "tests/test_tables_rank.py", "tests/test_tables_cells.py",
                                 "tests/test_ways.py", "tests/test_efficiency.py",
                                 "tests/test_fits_rule.py"),  # marks, answers
    "harness/report/pages/chooser.py": ("tests/test_chooser.py",),
    # test_pages.py publishes with asv
    "harness/report/pages/headline.py": ("tests/test_headline.py", "tests/test_small_lies.py"),
    "harness/report/pages/versions.py": ("tests/test_pages_versions.py",),
    "harness/report/scaling.py": ("tests/test_scaling.py",),
    "harness/report/model.py": ("tests/test_model_rows.py", "tests/test_headline.py",
                                      "tests/test_tables_cells.py", "tests/test_efficiency.py"),
    # test_fits.py starts processes
    "harness/workloads/search/fits.py": ("tests/test_fits_search.py", "tests/test_fits_rule.py"),
    # the replay estimator: grown programmes, their answers and their tests against the probes
    "harness/workloads/search/replayed.py": ("tests/test_programmes.py", "tests/test_fits.py"),
    "harness/workloads/training/tricks.py": ("tests/test_loss_check.py",),  # test_tricks.py trains: minutes a mutant
    "harness/workloads/training/reference.py": ("tests/test_loss_check.py",),
    "harness/units.py": ("tests/test_units.py",),
    "harness/measure/records/store.py": ("tests/test_store.py", "tests/test_record.py", "tests/test_inputs_hostile.py",
                                         "tests/test_begun.py",
                                         # test_kills.py kills processes: minutes a mutant
                                         "tests/test_outcomes.py", "tests/test_compare_resume.py"),
    # its shape draws: the sizes every step meets
    "harness/workloads/training/fragmenting.py": ("tests/test_fragmentation.py",),
    "harness/measure/instruments/busy.py": ("tests/test_busy.py", "tests/test_busy_families.py",
                                            "tests/test_step_peaks.py"),
    "harness/drive/asv/suite.py": ("tests/test_suite.py", "tests/test_cli.py"),
    "harness/drive/asv/begun.py": ("tests/test_begun.py",),  # what a died or raising case's record says
    "harness/drive/commands/compare_state.py": ("tests/test_compare_resume.py",),  # what a resumed compare goes on with
    "harness/drive/commands/compare.py": ("tests/test_compare_resume.py", "tests/test_compare_refusals.py",
                                 "tests/test_compare_session.py"),  # test_compare.py clones this repository
    # the models every figure of tricks and parallel trains
    "harness/workloads/training/models.py": ("tests/test_models.py",),
    "harness/measure/guards/inputs.py": ("tests/test_inputs.py", "tests/test_inputs_hostile.py", "tests/test_store.py"),
    # the labels asv's site shows
    "harness/drive/asv/asv_labels.py": ("tests/test_asv_labels.py", "tests/test_asv_site.py"),
    "harness/drive/asv/plain_asv.py": ("tests/test_plain_asv.py",),  # the commit and run a plain asv run files under
    "harness/measure/guards/safety.py": ("tests/test_safety.py",),  # the managed-memory guard
    # what a working set may ask of card and host
    "harness/measure/guards/workingset.py": ("tests/test_workingset.py",),
    # which card a process's memory lands on
    "harness/measure/instruments/devices.py": ("tests/test_devices.py", "tests/test_devices_nvml.py"),
    "harness/measure/instruments/host.py": ("tests/test_host.py",),  # the host a record came from
    "harness/measure/outcomes.py": ("tests/test_outcomes_rules.py", "tests/test_outcomes.py"),  # how a case ends
    "harness/measure/records/record.py": ("tests/test_record_fields.py", "tests/test_record.py",
                                  "tests/test_store.py"),  # what a record says, and what is no record
    # the folder records land in
    "harness/measure/instruments/machine.py": ("tests/test_machine.py", "tests/test_asv_site.py"),
    "harness/measure/instruments/environment.py": ("tests/test_environment.py",),  # the stack a figure is filed under
    "harness/measure/guards/requirements.py": ("tests/test_requirements.py",),  # why a case skips, and the fix it names
    "harness/measure/guards/locks.py": ("tests/test_locks_rules.py",),  # who holds a results folder or a GPU
    # what a command may replace or remove
    "harness/measure/guards/owned.py": ("tests/test_owned_rules.py", "tests/test_owned.py"),
    "harness/report/pages/names.py": ("tests/test_page_names.py",),  # the file each page is written to
    "harness/report/pages/fmt.py": ("tests/test_page_names.py",),  # parameters and ratios on every page
    "harness/report/docs.py": ("tests/test_docs_parts.py",),  # tests/test_docs.py makes the docs: seconds a mutant
    "harness/report/pages/tableview.py": ("tests/test_page_charts.py",),  # a family page's columns and folded line
    "harness/report/pages/charts.py": ("tests/test_page_charts.py",),  # the points each chart draws
    "harness/report/specs.py": ("tests/test_specs.py",),  # the command each docs table is printed by
    # what a machine still lacks
    "harness/drive/commands/todo.py": ("tests/test_todo_rules.py", "tests/test_todo.py", "tests/test_profiles.py"),
    # how a case's end becomes a record
    "harness/drive/runner.py": ("tests/test_runner.py", "tests/test_outcomes.py", "tests/test_config.py"),
    "harness/drive/asv/bench.py": ("tests/test_bench.py", "tests/test_outcomes.py", "tests/test_small_lies.py",
                               "tests/test_begun.py"),  # what asv is handed of a record
    # what a run shows of asv
    "harness/drive/asv/asv_output.py": ("tests/test_asv_output.py", "tests/test_small_lies.py"),
    # the branches and folders asv is given
    "harness/drive/asv/asvconf.py": ("tests/test_asvconf_branches.py", "tests/test_asvconf.py"),
    "harness/drive/bytecode.py": ("tests/test_bytecode.py",),  # where a compare's processes keep their bytecode
    "harness/drive/commands/wheelhouse.py": ("tests/test_wheelhouse.py",),  # the wheels an offline box installs from
    # the interpreter a versions run measures another stack in
    "harness/drive/commands/stack.py": ("tests/test_stack_rules.py", "tests/test_stack.py"),
    # what a report's text can carry
    "harness/report/markdown.py": ("tests/test_markdown.py", "tests/test_gate_markdown.py"),
    "harness/report/summary.py": ("tests/test_summary.py", "tests/test_small_lies.py"),  # the table a run closes with
}
# Where only part of a module writes a verdict, the functions mutated: the rest trains models
# (tricks) or starts the probes' processes (fits), and is tested by doing so, seconds a mutant.
PART = {"harness/workloads/training/tricks.py": ("losses_checked",),
        "harness/workloads/training/reference.py": ("aligned", "curve_gap", "deviation", "against_reference",
                                                   "checked_against_reference"),
        "harness/workloads/search/fits.py": ("largest_fitting", "_in_units", "_top", "_under", "_search", "_recorded",
                                      "_first_fit", "_narrow", "_try", "_cold_start", "_bracket", "_gallop", "_up",
                                      "_down", "linear_estimate", "_on_line", "side_by_side"),
        # Where the docs' figures come from and where they are put; the tables' and the headline's own
        # figures are tables.py's and model.py's, mutated there.
        "harness/report/docs.py": ("_records_glob", "_cupy", "_gpus", "table_section", "refresh_readme", "readme_part",
                                   "readme_headline", "profile_times_md", "out_problem", "write"),
        # The rest of specs.py declares the tables: text and parameters, read by the docs' freshness test.
        "harness/report/specs.py": ("Spec.args", "Spec.command", "Spec.matches", "Spec.grid", "Spec.render"),
        # What a run chooses to measure; the rest drives asv and is tested by running it (test_kills.py,
        # test_locks.py, test_asv_front.py), seconds to minutes a mutant.
        "harness/drive/asv/suite.py": ("Selection.flags", "Selection.of", "resumed", "resumable", "with_ceilings",
                                   "environments"),
        # A compare's bookkeeping: which runs are left, where each is filed, what a stopped sitting
        # set aside, the measuring time it reports, and a sitting's loop over its runs with a stand-in
        # for their processes; the rest makes worktrees and starts processes.
        "harness/drive/commands/compare.py": ("order", "contexts", "remaining", "set_aside", "past", "Timer.__init__",
                                     "Timer.tick", "refuse_used", "resume_command", "measured", "one_round", "shared",
                                     "resolve", "refuse_dirty", "chosen", "told", "headed", "filed", "measure_all",
                                     "warm_up", "neighbours", "so_far"),
        # All but torchvision's ResNet50 and its layers: the CPU test set has no torchvision.
        "harness/workloads/training/models.py": ("LMConfig.__post_init__", "transformer_lm", "tied_weight", "run_block",
                                        "EncDecConfig.__post_init__", "encoder_decoder", "tokens", "images",
                                        "parameter_count", "lm_layers"),
        "harness/workloads/training/fragmenting.py": ("shapes_of", "_unknown", "rows", "sequences", "images",
                                                      "live_bytes"),
        "harness/measure/instruments/busy.py": ("union_s", "fraction", "_profiled", "_nvml_beside", "_untraced",
                                                "_nvml_reading", "_as_reading", "gpu_busy"),
        # All but the warm-ups, which run kernels on a GPU to read what CUDA holds: measured there.
        "harness/measure/guards/budget.py": ("Budget.to_dict", "Budget.managed_note", "Budget.over", "_known",
                                             "is_whole_card", "size_bytes", "resolve", "_named", "handed_back",
                                             "handed", "measure_overhead", "held_here", "_held_by", "enforce_torch",
                                             "TorchCap.lift", "uncapped_on_cpu", "torch_capped", "cap_torch",
                                             "enforce_pool")}
THRESHOLD = 90.0  # percent of mutants killed, per module
# What mutmut's copy needs besides the module: the package, the tests and what they read (a
# few tests still take a committed record as a template).
SHARED = ("harness", "tests", "pyproject.toml", "README.md", "docs", "benchmarks", "asv.conf.json",
          "asv.versions.conf.json", "results")
# What one module's tests read besides: asv publish reads the commits (other tests take a copy
# without .git for no checkout, as it is under mutmut).
SHARED_WITH = {"harness/drive/asv/asv_labels.py": (".git",), "harness/measure/instruments/machine.py": (".git",)}
# Tests left out of every run: one reads a module's source text, which mutmut rewrites (its
# trampolines import mutmut); one runs the module in a process of its own, which mutmut cannot see;
# two read the committed records through git, and mutmut's copy is no git checkout.
LEFT_OUT = ("tests/test_units.py::test_units_stays_the_lowest_layer",
            "tests/test_fits.py::test_the_real_probe_trains_in_its_own_process_and_answers_in_json",
            "tests/test_tables.py::test_every_table_the_docs_quote_is_what_the_command_prints_from_results",
            "tests/test_tables.py::test_a_command_the_docs_quote_without_a_table_has_no_records_to_print")
MUTMUT_COPIES = ("harness", "tests", "pyproject.toml")  # mutmut copies these itself
WORK = ".mutmut"
# Statuses that count as caught: a test failed, or the mutant ran forever and was stopped.
CAUGHT = {"killed", "timeout", "caught by type check", "segfault"}


class Refused(Exception):
    """Bad input or a missing tester: one line that names the fix."""


@dataclass(frozen=True)
class Score:
    module: str
    killed: int
    total: int
    survivors: tuple[str, ...]

    @property
    def percent(self) -> float:
        return 100.0 * self.killed / self.total if self.total else 100.0


def chosen(modules) -> list[str]:
    """The modules to mutate, in TESTS' order; all of them when none is named."""
    unknown = [m for m in modules if m not in TESTS]
    if unknown:
        raise Refused(f"no mutation set-up for {', '.join(unknown)}: name one of {', '.join(TESTS)} "
                      f"(or add it with its tests to TESTS in harness/drive/commands/mutate.py)")
    return [m for m in TESTS if not modules or m in modules]


def check_tester() -> None:
    if importlib.util.find_spec("mutmut") is None:
        raise Refused(f"mutmut is not installed in {sys.executable}: pip install 'mutmut>=3.8' "
                      "(the test extra has it)")


def folder(root: Path, module: str) -> Path:
    """The module's own folder: links to the repository's files and mutmut's set-up."""
    work = root / WORK / module.removesuffix(".py").replace("/", ".")
    # mutmut keeps a result until its function changes, and copies a module only when its copy is
    # missing: after a test or another module changed, either would be stale. Each run starts anew.
    shutil.rmtree(work / "mutants", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    shared = SHARED + SHARED_WITH.get(module, ())
    for stale in (p for p in work.iterdir() if p.is_symlink() and p.name not in shared):
        stale.unlink()  # a .git linked for another set-up would make mutmut's copy a checkout
    for name in shared:
        link = work / name
        if (root / name).exists() and not link.is_symlink():
            link.symlink_to(root / name)
    cfg = configparser.ConfigParser()
    cfg["mutmut"] = {
        "source_paths": "harness",
        "only_mutate": module,
        "also_copy": "\n".join(n for n in shared if n not in MUTMUT_COPIES and (root / n).exists()),
        "pytest_add_cli_args_test_selection": "\n".join(TESTS[module]),
        # -n 0: mutmut reads which test reaches which function in its own process, not in xdist's workers.
        "pytest_add_cli_args": "\n".join(["-p", "no:cacheprovider", "-n", "0",
                                          *(f"--deselect={t}" for t in LEFT_OUT)]),
        # A mutant that loops forever (a search whose bracket never closes) is stopped after this many
        # times its tests' CPU seconds, twice over (mutmut's default, 15, spends minutes on each).
        "timeout_multiplier": "3",
    }
    with open(work / "setup.cfg", "w") as f:
        cfg.write(f)
    return work


def patterns(module: str) -> list[str]:
    """mutmut's names for the mutants of PART's functions (and "Class.method"s) of ``module``;
    none: all of them."""
    dotted = module.removesuffix(".py").replace("/", ".")
    return [f"{dotted}.{mangled(name)}__mutmut_*" for name in PART.get(module, ())]


def mangled(name: str) -> str:
    """mutmut's name for a function, or for a method given as "Class.method"."""
    cls, _, method = name.rpartition(".")
    return f"xǁ{cls}ǁ{method}" if cls else f"x_{name}"


def run_tester(work: Path, module: str) -> str:
    """mutmut's run in ``work``, then its list of every mutant with its status."""
    mutmut = [sys.executable, "-m", "mutmut"]
    env = {k: v for k, v in os.environ.items() if k != "OOMBENCH_HYPOTHESIS"}  # the default profile's examples
    # mutmut forks a worker per mutant from a process that has imported torch: a thread pool does
    # not survive a fork, and the worker hangs until mutmut stops it, which would count as caught.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if subprocess.run(mutmut + ["run", *patterns(module)], cwd=work, env=env).returncode != 0:
        raise Refused(f"mutmut stopped on {module} (its output above says why): its tests must pass unmutated; "
                      f"try python3 -m pytest {' '.join(TESTS[module])}")
    return subprocess.run(mutmut + ["results", "--all", "true"], cwd=work, env=env, check=True,
                          capture_output=True, text=True).stdout


LINE = re.compile(r"^\s*(\S+__mutmut_\d+): (.+?)\s*$")


def score(module: str, listing: str) -> Score:
    """Count the mutants in mutmut's ``results --all true`` listing."""
    status = dict(m.groups() for m in map(LINE.match, listing.splitlines()) if m)
    if module in PART:
        status = {k: v for k, v in status.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns(module))}
    survivors = tuple(sorted(name for name, s in status.items() if s not in CAUGHT | {"skipped"}))
    counted = [s for s in status.values() if s != "skipped"]
    return Score(module, sum(s in CAUGHT for s in counted), len(counted), survivors)


def table(scores) -> str:
    from tabulate import tabulate
    rows = [(s.module, f"{s.killed} / {s.total}", f"{s.percent:.1f}%") for s in scores]
    return tabulate(rows, headers=("module", "killed / total", "score"), disable_numparse=True)


def main(modules, root: Path = REPO) -> int:
    """Mutate each module and print its score; 1 when any is under THRESHOLD."""
    names = chosen(modules)
    check_tester()
    scores = [score(m, run_tester(folder(root, m), m)) for m in names]
    for s in scores:
        for name in s.survivors:
            print(f"survived: {name}")
    print(table(scores))
    if any(s.survivors for s in scores):
        print(f"each survivor's change: python3 -m mutmut show NAME, in {WORK}/<module>/")
    return 1 if any(s.percent < THRESHOLD for s in scores) else 0
