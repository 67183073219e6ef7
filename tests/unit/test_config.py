"""Option precedence and validation: flag > SPECWATCH_* > ini > default."""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.errors import UsageError
from specwatch.run.options import OPTIONS, Config, resolve


def test_defaults_when_nothing_is_set() -> None:
    cfg = resolve({}, {}, {})
    assert cfg.tolerance == 0.05 and cfg.alpha == 0.01 and cfg.device == "auto"
    assert cfg.update_baselines is False and cfg.server_url is None


def test_flag_beats_env_beats_ini() -> None:
    ini = {"specwatch_tolerance": "3%", "specwatch_runs": "4", "specwatch_device": "cpu"}
    env = {"SPECWATCH_TOLERANCE": "0.04", "SPECWATCH_RUNS": "6"}
    cfg = resolve({"tolerance": "0.02"}, env, ini)
    assert cfg.tolerance == pytest.approx(0.02)  # flag
    assert cfg.runs == 6  # env over ini
    assert cfg.device == "cpu"  # ini over default


def test_percent_and_fraction_tolerances() -> None:
    assert resolve({"tolerance": "5%"}, {}, {}).tolerance == pytest.approx(0.05)
    assert resolve({"tolerance": "0.1"}, {}, {}).tolerance == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("flags", "env", "where"),
    [
        ({"tolerance": "150%"}, {}, "--specwatch-tolerance"),
        ({}, {"SPECWATCH_RUNS": "zero"}, "SPECWATCH_RUNS"),
        ({"device": "tpu"}, {}, "--specwatch-device"),
        ({"engine": "vllm"}, {}, "--specwatch-engine"),
    ],
)
def test_bad_values_name_their_source(flags: dict, env: dict, where: str) -> None:
    with pytest.raises(UsageError, match=where):
        resolve(flags, env, {})


def test_flag_boolean_from_env() -> None:
    assert resolve({}, {"SPECWATCH_UPDATE_BASELINES": "yes"}, {}).update_baselines is True
    with pytest.raises(UsageError, match="SPECWATCH_UPDATE_BASELINES"):
        resolve({}, {"SPECWATCH_UPDATE_BASELINES": "maybe"}, {})


def test_every_option_maps_to_a_config_field() -> None:
    fields = set(Config.__dataclass_fields__)
    assert {o.name for o in OPTIONS} <= fields
    flags = [o.flag for o in OPTIONS]
    assert len(flags) == len(set(flags))
    assert all(f.startswith("--specwatch-") for f in flags)  # every flag carries the plugin's prefix
    aliases = {a for o in OPTIONS for a in o.aliases}
    assert aliases == {"--server-url", "--update-baselines"}  # the older spellings still work


def test_paths_resolve_against_rootdir(tmp_path: Path) -> None:
    cfg = resolve({"baseline_dir": "b"}, {}, {}, rootdir=tmp_path)
    assert cfg.path(cfg.baseline_dir) == tmp_path / "b"
    assert cfg.path("/abs") == Path("/abs")


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("tolerance", "0", "a fraction in (0, 1)"),  # 0: every change would be a regression
    ("tolerance", "0%", "a fraction in (0, 1)"),
    ("tolerance", "nan", "a fraction in (0, 1)"),
    ("tolerance", "-5%", "a fraction in (0, 1)"),
    ("alpha", "5", "a probability in (0, 1)"),
    ("alpha", "0", "a probability in (0, 1)"),
    ("alpha", "nan", "a probability in (0, 1)"),
    ("boot_timeout", "nan", "a number > 0"),
    ("boot_timeout", "inf", "a number > 0"),
    ("boot_timeout", "-1", "a number > 0"),
    ("boot_timeout", "soon", "a number > 0"),
    ("runs", "0", "a positive integer"),
    ("runs", "2.5", "a positive integer"),
    ("runs", "zero", "a positive integer"),
    ("tp", "-2", "a positive integer"),
    ("baseline_sessions", "0", "a positive integer"),
    ("warmup", "-1", "an integer ≥ 0"),
    ("warmup", "x", "an integer ≥ 0"),
])
def test_numeric_options_reject_nan_inf_and_out_of_range_in_one_line(name: str, value: str, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve({name: value}, {}, {})
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and msg.startswith("--specwatch-" + name.replace("_", "-")) and expected in msg


def test_edge_values_that_are_valid() -> None:
    cfg = resolve({"warmup": "0", "alpha": "0.05", "tolerance": "99%", "boot_timeout": "1e3"}, {}, {})
    assert (cfg.warmup, cfg.alpha, cfg.boot_timeout) == (0, 0.05, 1000.0) and cfg.tolerance == pytest.approx(0.99)


def test_every_default_is_written_once_in_options() -> None:
    """Config's fields are the options, and their defaults are the options' defaults (one owner)."""
    import dataclasses

    from specwatch.run.options import DEFAULTS, OPTIONS, Config

    fields = {f.name: f.default for f in dataclasses.fields(Config) if f.name != "rootdir"}
    assert set(fields) == {o.name for o in OPTIONS}
    assert fields == DEFAULTS
