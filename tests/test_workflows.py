"""The GitHub workflows: every ``python3 -m harness`` command they run exists and parses with the
harness's own parser; the GPU runner's posts the report its compare writes; the pages' publishes
the folder its `harness pages` builds from the committed results, asv's site beside it."""
import re
import shlex
from pathlib import Path

import pytest
import yaml

from harness.drive.commands import cli

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github/workflows/gpu-compare.yml"
PAGES = REPO / ".github/workflows/pages.yml"
# What GitHub or the shell fills in at run time: ${{ expression }}, $NAME and ${NAME}.
FILLED_IN = re.compile(r"\$\{\{.*?\}\}|\$\{?(\w+)\}?")
CONTROL = {";", "&&", "||", "|", "&"}


def load(path: Path = WORKFLOW) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def harness_commands(script: str) -> list[tuple[list[str], set[str]]]:
    """Each ``python3 -m harness`` command of a step's script, shell-split with what is filled in at
    run time as PLACEHOLDER, and the shell variables it reads."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(FILLED_IN.sub("PLACEHOLDER", line), posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        words, command = list(lexer), []
        for word in words + [";"]:
            if word not in CONTROL:
                command.append(word)
                continue
            if command[:3] in (["python3", "-m", "harness"], ["python", "-m", "harness"]):
                out.append((command[3:], {m.group(1) for m in FILLED_IN.finditer(line) if m.group(1)}))
            command = []
    return out


def test_harness_commands_are_found_as_the_shell_splits_them():
    got = harness_commands('cd x && python3 -m harness compare "origin/$BASE_REF" ${{ github.sha }} # note\n'
                           "echo done; python -m harness gate a b")
    assert got == [(["compare", "origin/PLACEHOLDER", "PLACEHOLDER"], {"BASE_REF"}), (["gate", "a", "b"], set())]


@pytest.mark.parametrize("workflow", [WORKFLOW, PAGES], ids=lambda p: p.name)
def test_every_harness_command_of_the_workflow_parses_and_reads_only_variables_it_sets(workflow):
    commands = [(cmd, used, step) for step in steps(load(workflow)) for cmd, used in
                harness_commands(step.get("run", ""))]
    assert commands, f"{workflow.name} runs no python3 -m harness command"
    for cmd, used, step in commands:
        args = cli.parse(cmd)  # a UsageError names a command or option the harness does not have
        assert args.func is not None
        assert used <= set(step.get("env", {})), f"{shlex.join(cmd)} reads variables its step does not set"


def test_on_each_pull_request_the_gpu_runner_compares_the_target_branch_with_the_head_and_posts_the_report():
    doc = load()
    assert "pull_request" in doc["on"] and doc["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = doc["jobs"].values()
    assert set(job["runs-on"]) >= {"self-hosted", "gpu"}
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # BASE's commit must be there for its worktree
    (compare, step), = [(cmd, s) for s in job["steps"] for cmd, _ in harness_commands(s.get("run", ""))
                        if cmd[0] == "compare"]
    args = cli.parse(compare)
    assert (args.base, args.new, args.profile) == ("origin/PLACEHOLDER", "PLACEHOLDER", "quick")
    assert step["env"] == {"BASE_REF": "${{ github.base_ref }}",
                           "HEAD_SHA": "${{ github.event.pull_request.head.sha }}"}
    assert re.search(r'"origin/\$BASE_REF" "\$HEAD_SHA"', step["run"])
    comment = next(s for s in job["steps"] if s.get("uses", "").startswith("marocchino/sticky-pull-request-comment@"))
    assert comment["with"]["path"] == args.report


@pytest.mark.parametrize("bad", ["compare main --profle quick", "comparison main", "compare main --rounds 0"])
def test_a_command_the_harness_does_not_have_fails_the_check(bad):
    (cmd, _), = harness_commands(f"python3 -m harness {bad}")
    with pytest.raises(cli.UsageError):
        cli.parse(cmd)


def test_on_each_push_to_main_the_pages_are_built_from_the_committed_results_and_deployed_with_asv_s_site():
    doc = load(PAGES)
    assert doc["on"]["push"]["branches"] == ["main"] and "results/**" in doc["on"]["push"]["paths"]
    assert doc["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    build, deploy = doc["jobs"]["build"], doc["jobs"]["deploy"]
    (pages, step), = [(cmd, s) for s in build["steps"] for cmd, _ in harness_commands(s.get("run", ""))]
    args = cli.parse(pages)
    assert args.func is cli._pages and args.results == "results" and not args.no_asv  # committed, asv's site too
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    site = Path(upload["with"]["path"])
    assert Path(args.out).parent == site  # the comparison pages go up with the artifact
    # asv's site beside them, where their "asv history" link (../html/) finds it, and the root sends to pages/
    assert f"cp -r .asv/html {site / 'html'}" in step["run"] and f"> {site / 'index.html'}" in step["run"]
    assert f"url={Path(args.out).name}/index.html" in step["run"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]
