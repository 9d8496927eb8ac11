"""A case's parameters as one frozen Config, validated once: a bad value is refused naming the
allowed ones, the string form of a value converts, the config survives a process boundary as its
own JSON and nothing else, and a run validates it exactly once."""
import dataclasses
import json

import pytest

from harness.measure.guards.budget import resolve
from harness.units import GB
from harness import cases
from harness.cases import ceilings
from harness.cases.base import Case, Config
from harness.drive.commands import cli
from harness.drive.runner import execute

TRICKS = dict(device="cpu", workload="lm", technique="fp32", budget="card",
              batch=16, micro_batch=4, vocab=128, width=32, depth=2,
              seq_len=16)


def tricks(**changes) -> Config:
    return cases.get("tricks").config(dict(TRICKS, **changes))


def test_a_bad_value_is_refused_naming_the_allowed_values_and_the_fix():
    with pytest.raises(ValueError, match=r"case 'tricks': technique='fp8' is not one of: fp32, tf32, fp16_autocast.*"
                                         r"pass one of them, e\.g\. technique=fp32"):
        tricks(technique="fp8")
    with pytest.raises(ValueError, match=r"batch=3 is not one of: 1, 2, 4, 5, 8, 10, 16"):
        tricks(batch=3)
    with pytest.raises(ValueError, match=r"batch='sixteen' is not one of: 1, 2, 4"):
        tricks(batch="sixteen")
    with pytest.raises(ValueError, match=r"needs seq_len: pass seq_len=VALUE, one of: 16, 128, 512"):
        cases.get("tricks").config({k: v for k, v in TRICKS.items() if k != "seq_len"})
    with pytest.raises(ValueError, match=r"has no parameter 'heads'; its parameters are device, workload"):
        tricks(heads=4)


def test_every_problem_of_a_config_is_named_at_once():
    with pytest.raises(ValueError) as e:
        cases.get("tricks").config(dict(TRICKS, width=33, depth=3, heads=4))
    assert "width=33" in str(e.value) and "depth=3" in str(e.value) and "'heads'" in str(e.value)


def test_the_string_form_of_a_value_converts_to_the_declared_value():
    config = cases.get("tricks").config({k: str(v) for k, v in TRICKS.items()})
    assert config == tricks() and config.batch == 16 and type(config.batch) is int
    assert cases.get("unified_seed").config({"fraction": "0.4"}).fraction == 0.4
    assert cases.get("tricks").value("seq_len", "1024") == 1024
    assert cases.get("tricks").config(dict(TRICKS, batch=16.0)).batch == 16  # a number equal to a declared one


def test_a_config_holds_its_parameters_in_the_declared_order_whatever_order_they_came_in():
    config = cases.get("tricks").config(dict(reversed(list(TRICKS.items()))))
    assert list(config.params) == list(cases.get("tricks").params) and config == tricks()


def test_a_config_is_frozen_hashable_and_read_only():
    config = tricks()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch = 32
    with pytest.raises(TypeError):
        config.params["batch"] = 32
    assert config["batch"] == config.batch == config.params["batch"] == 16
    assert hash(config) == hash(tricks()) and len({config, tricks(), tricks(batch=32)}) == 2
    assert {config: "x"}[tricks()] == "x"
    with pytest.raises(AttributeError, match="has no parameter 'heads'"):
        _ = config.heads
    with pytest.raises(KeyError, match="has no parameter 'heads'"):
        config["heads"]


def test_a_config_is_made_only_by_validating():
    with pytest.raises(TypeError, match=r"Case\.config"):
        Config("tricks", (("batch", 3),))
    with pytest.raises(TypeError, match=r"Case\.config"):
        dataclasses.replace(tricks(), pairs=(("batch", 3),))
    assert Config.of("tricks", TRICKS) == tricks() == Config.of(cases.get("tricks"), TRICKS)


@pytest.mark.parametrize("name, params", [
    ("tricks", TRICKS),
    ("fits", dict(device="cuda", workload="lm", technique="fp32", budget="16GB", over="batch", allocator="default",
                  vocab=128, width=32, depth=2, seq_len=16)),
    ("unified", dict(allocator="managed_pool", placement="fault", pattern="stream", fraction=0.1)),
    ("ceilings", dict(probe="host_copy")),
])
def test_json_round_trips(name, params):
    config = cases.get(name).config(params)
    back = Config.from_json(config.to_json())
    assert back == config and hash(back) == hash(config)
    assert {k: type(v) for k, v in back.params.items()} == {k: type(v) for k, v in config.params.items()}


def test_from_json_validates_again_and_refuses_what_was_tampered_with():
    text = tricks().to_json()
    d = json.loads(text)
    d["params"]["technique"] = "fp8"
    with pytest.raises(ValueError, match="technique='fp8' is not one of: fp32"):
        Config.from_json(json.dumps(d))
    d["params"]["technique"], d["params"]["heads"] = "fp32", 4
    with pytest.raises(ValueError, match="has no parameter 'heads'"):
        Config.from_json(json.dumps(d))
    with pytest.raises(ValueError, match="unknown case 'trick'"):
        Config.from_json(text.replace('"tricks"', '"trick"'))
    with pytest.raises(ValueError, match="not JSON"):
        Config.from_json(text[:-1])
    with pytest.raises(ValueError, match=r'\{"case": NAME, "params"'):
        Config.from_json(json.dumps(TRICKS))
    with pytest.raises(ValueError, match="expected a config of case 'fits', got one of 'tricks'"):
        Config.from_json(text, case="fits")


@pytest.fixture
def config_calls(monkeypatch):
    calls, real = [], Case.config

    def counted(self, params):
        calls.append(self.name)
        return real(self, params)

    monkeypatch.setattr(Case, "config", counted)
    monkeypatch.setitem(ceilings.BUILDERS, "host_copy", lambda: ceilings.host_copy(nbytes=2**20))
    return calls


def test_the_cli_validates_a_case_once_from_command_line_to_build(config_calls, capsys):
    assert cli.main(["case", "ceilings", "probe=host_copy", "--json"]) == 0
    assert config_calls == ["ceilings"]
    assert json.loads(capsys.readouterr().out)["params"] == {"probe": "host_copy"}


def test_execute_takes_a_config_as_it_is_and_makes_a_dict_into_one_once(config_calls):
    config = Config.of("ceilings", {"probe": "host_copy"})
    config_calls.clear()
    rec = execute("ceilings", config)
    assert rec.outcome == "ok" and rec.params == {"probe": "host_copy"} and config_calls == []
    assert execute("ceilings", {"probe": "host_copy"}).outcome == "ok" and config_calls == ["ceilings"]
    with pytest.raises(ValueError, match="a config of case 'ceilings' is not one of case 'tricks'"):
        execute("tricks", config)


def test_the_builders_take_the_configs_word_and_skip_only_combinations():
    from harness.measure.outcomes import Skip
    from harness.workloads.chainer import chainer_backend
    from harness.workloads.training import tricks as trick_steps, ways
    from harness.workloads.training.ways import parse
    # No second check of the declared values: the config is the one place that refuses them, so
    # a builder handed a value outside them (which no config lets through) does not check again.
    assert ways.applies(parse("bf16_autocast"), "gpt", trick_steps.IMAGE_MODELS, trick_steps.TOKEN_MODELS) is None
    assert ways.applies(parse("seq_cap"), "lm", trick_steps.IMAGE_MODELS, trick_steps.TOKEN_MODELS) is None
    assert chainer_backend.check_pairing("tpu", "device_pool") is None
    assert chainer_backend.check_pairing("cpu", "numpy") is None
    assert resolve("16GB", 24 * 2**30, None).limit_bytes == 16 * GB
    with pytest.raises(Skip, match="seq_cap applies to workload lm only"):
        ways.applies(parse("seq_cap"), "encdec", trick_steps.IMAGE_MODELS, trick_steps.TOKEN_MODELS)
    with pytest.raises(Skip, match="pool=numpy is the CPU's"):
        chainer_backend.check_pairing("cuda", "numpy")
    rec = execute("tricks", tricks(workload="encdec", technique="seq_cap"))
    assert rec.outcome == "skipped" and "applies to workload lm only" in rec.reason


def test_the_command_line_and_where_convert_as_the_config_does(capsys):
    from harness.report import tables
    assert cli.parse_params(["batch=16", "technique=fp32"]) == {"batch": "16", "technique": "fp32"}
    with pytest.raises(ValueError, match="given twice"):
        cli.parse_params(["batch=16", "batch=32"])
    assert cli.main(["case", "tricks", *(f"{k}={v}" for k, v in dict(TRICKS, batch=3).items())]) == 2
    assert "batch='3' is not one of: 1, 2, 4" in capsys.readouterr().err
    case = cases.get("tricks")
    assert tables.where_of(case, ["batch=64", "machine=H200"]) == {"batch": 64, "machine": "H200"}
    with pytest.raises(ValueError, match="batch='65' is not one of: 1, 2, 4"):
        tables.where_of(case, ["batch=65"])
