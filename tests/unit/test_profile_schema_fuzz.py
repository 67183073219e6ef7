"""Property tests of the profile schema: whatever a profile file holds, loading it either gives a
profile set whose command lines build, or raises ONE UsageError line naming the file (and, for a
bad field, the field) -- never another exception, and ``specwatch profile show`` exits 2 with one
line on stderr and no traceback.

Profiles are written with the small TOML serializer below (``tomli_w`` is not a dependency): every
value goes on one ``key = inline value`` line, which TOML 1.0 allows for tables and arrays of
tables too (``server = [{ name = "a" }]``).
"""

from __future__ import annotations

import copy
import datetime
import io
import math
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specwatch.cli import main
from specwatch.errors import EXIT_OK, EXIT_USAGE, UsageError
from specwatch.load.workload import SINGLE_STREAM
from specwatch.profiles.loading import load_profiles, parse_profiles
from specwatch.profiles.profile import Gates, ProfileSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# --- a tiny TOML writer -------------------------------------------------------------------------


def toml_str(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a TOML value: {value!r}")


def dumps(doc: dict[str, Any]) -> str:
    return "".join(f"{toml_str(k)} = {toml_value(v)}\n" for k, v in doc.items())


# --- a valid profile and where it can be broken -------------------------------------------------

VALID: dict[str, Any] = {
    "version": 1,
    "defaults": {"engine": "reference", "model": "ref-tiny", "device": "auto", "decode_log_interval": 10,
                 "floor_tok_s": 50, "tolerance": 0.5, "nccl_debug": True},
    "env_profiles": {"socket": {"NCCL_P2P_DISABLE": "1"}},
    "server": [
        {"name": "base", "env": "tuned", "tp": 1, "max_running_requests": 8, "cuda_graph_max_bs": 8},
        {"name": "spec", "env": "socket", "env_apply": "sitecustomize", "extra_args": ["--x"],
         "extra_env": {"A": "1"}, "pythonpath": ["/tmp"], "launcher": "sglang serve", "python": "python3",
         "speculative": {"algorithm": "EAGLE3", "draft_model": "d", "num_steps": 2, "eagle_topk": 1,
                         "num_draft_tokens": 3}},
    ],
    "fixtures": {"baseline": "base", "spec": "spec"},
    "gates": {"spec_margin": 0.3, "tuned_tolerance": 0.02, "expect_tuning_effect": False, "tuning_min_effect": 0.05,
              "alternate_rounds": 2, "interleave_runs": False},
    "workload": {"runs": 5, "warmup": 1, "warmup_s": 1.0, "min_duration_s": 0.0, "max_new_tokens": 16},
}

# Wrong values by the kind of field (an independent statement of the schema, not read from it).
_texts = st.text(max_size=12)
_ints = st.integers(-(2**63), 2**63 - 1)
_floats = st.floats()  # NaN and inf included
_tables = st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)
_int_lists = st.lists(st.integers(), min_size=1, max_size=3)
WRONG: dict[str, st.SearchStrategy[Any]] = {
    "int": st.one_of(_texts, st.booleans(), _floats, _int_lists, _tables),
    "number": st.one_of(_texts, st.booleans(), _int_lists, _tables, st.sampled_from([math.nan, math.inf, -math.inf])),
    "env-value": st.one_of(_ints, _floats, st.booleans(), _int_lists, _tables),  # "" is a valid value
    "string": st.one_of(_ints, _floats, st.booleans(), _int_lists, _tables, st.just("")),
    "bool": st.one_of(_ints, _floats, _texts, _int_lists, _tables),
    "table": st.one_of(_ints, _floats, _texts, st.booleans(), _int_lists),
    "str-array": st.one_of(_ints, st.booleans(), _tables, st.lists(_ints, min_size=1, max_size=3),
                           _texts.filter(bool)),
    "speculative": st.one_of(_ints, _floats, _texts, st.just(True), _int_lists),
    "servers": st.one_of(_ints, _texts, _tables, st.lists(st.one_of(_ints, _texts), max_size=3)),
    "name": st.one_of(_ints, st.booleans(), _int_lists,
                      st.sampled_from(["", "../../etc", "a/b", ".x", "a b", "-a", "x" * 101, "é"])),
    "version": st.one_of(_ints.filter(lambda v: v != 1), st.booleans(), _texts, _floats),
}
OUT_OF_RANGE: dict[str, st.SearchStrategy[Any]] = {
    "int>=1": st.integers(max_value=0),
    "int>=0": st.integers(max_value=-1),
    "fraction": st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0), st.integers(max_value=0)),
    "positive": st.one_of(st.floats(max_value=0.0), st.integers(max_value=0)),
    "margin": st.one_of(st.floats(max_value=-1.0), st.integers(max_value=-1)),
    "seconds600": st.one_of(st.floats(min_value=600.0, exclude_min=True), st.floats(max_value=0.0, exclude_max=True)),
    "seconds3600": st.one_of(st.floats(min_value=3600.0, exclude_min=True), st.floats(max_value=0.0, exclude_max=True)),
}
_SERVER_KINDS = {
    "engine": ("string", None), "model": ("string", None), "tp": ("int", "int>=1"), "device": ("string", None),
    "env": ("string", None), "env_apply": ("string", None), "extra_args": ("str-array", None),
    "extra_env": ("table", None), "pythonpath": ("str-array", None), "launcher": ("string", None),
    "python": ("string", None), "max_running_requests": ("int", "int>=1"), "cuda_graph_max_bs": ("int", "int>=1"),
    "decode_log_interval": ("int", "int>=1"), "nccl_debug": ("bool", None), "floor_tok_s": ("number", "positive"),
    "tolerance": ("number", "fraction"), "speculative": ("speculative", None), "api": ("string", None),
    "url": ("string", None),
}
#: (where in VALID, the path an error must name, {key: (wrong kind, out-of-range kind)})
LOCATIONS: list[tuple[tuple[Any, ...], str, dict[str, tuple[str, str | None]]]] = [
    ((), "", {"version": ("version", None), "defaults": ("table", None), "env_profiles": ("table", None),
              "server": ("servers", None), "fixtures": ("table", None), "gates": ("table", None),
              "workload": ("table", None)}),
    (("defaults",), "defaults", _SERVER_KINDS),
    (("server", 0), "server[0] (base)", _SERVER_KINDS),
    (("server", 1), "server[1]", {"name": ("name", None)}),
    (("server", 1, "speculative"), "server[1] (spec).speculative",
     {"algorithm": ("string", None), "draft_model": ("string", None), "num_steps": ("int", "int>=1"),
      "eagle_topk": ("int", "int>=1"), "num_draft_tokens": ("int", "int>=1")}),
    (("server", 1, "extra_env"), "server[1] (spec).extra_env", {"A": ("env-value", None)}),
    (("env_profiles",), "env_profiles", {"socket": ("table", None)}),
    (("env_profiles", "socket"), "env_profiles.socket", {"NCCL_P2P_DISABLE": ("env-value", None)}),
    (("fixtures",), "fixtures", {"baseline": ("string", None), "spec": ("string", None)}),
    (("gates",), "gates", {"spec_margin": ("number", "margin"), "tuned_tolerance": ("number", "fraction"),
                           "expect_tuning_effect": ("bool", None), "tuning_min_effect": ("number", "fraction"),
                           "alternate_rounds": ("int", "int>=1"), "interleave_runs": ("bool", None)}),
    (("workload",), "workload", {"runs": ("int", "int>=1"), "warmup": ("int", "int>=0"),
                                 "warmup_s": ("number", "seconds600"), "min_duration_s": ("number", "seconds3600"),
                                 "max_new_tokens": ("int", "int>=1")}),
]


def _set(doc: dict[str, Any], where: tuple[Any, ...], key: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    table: Any = doc
    for step in where:
        table = table[step]
    table[key] = value
    return doc


@st.composite
def broken_docs(draw: Callable[..., Any]) -> tuple[dict[str, Any], str]:
    """VALID with one field set to a value of the wrong type or out of its range; the field's path."""
    where, path, kinds = draw(st.sampled_from(LOCATIONS))
    key = draw(st.sampled_from(sorted(kinds)))
    wrong, out_of_range = kinds[key]
    strategy = WRONG[wrong] if out_of_range is None else st.one_of(WRONG[wrong], OUT_OF_RANGE[out_of_range])
    value = draw(strategy)
    return _set(VALID, where, key, value), f"{path}.{key}" if path else f": {key}:"


_keys = st.text(max_size=8)
toml_values = st.recursive(
    st.one_of(st.booleans(), _ints, st.floats(), st.text(max_size=20), st.dates(), st.times()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def mutated_docs(draw: Callable[..., Any]) -> dict[str, Any]:
    """VALID with one key (known or not) anywhere set to any TOML value, or deleted."""
    where, _, kinds = draw(st.sampled_from(LOCATIONS))
    key = draw(st.one_of(st.sampled_from(sorted(kinds)), _keys))
    if draw(st.booleans()):
        doc = copy.deepcopy(VALID)
        table: Any = doc
        for step in where:
            table = table[step]
        table.pop(key, None)
        return doc
    return _set(VALID, where, key, draw(toml_values))


# --- the checks ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


def _write(workdir: Path, content: str | bytes) -> Path:
    path = workdir / "profile.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def _load_or_one_line(path: Path) -> ProfileSet | str:
    """The profile set, or the UsageError's message after checking that it is one line naming the file."""
    try:
        ps = load_profiles(path)
    except UsageError as exc:
        msg = str(exc)
        assert len(msg.splitlines()) == 1 and "\n" not in msg, msg
        assert str(path) in msg, msg
        return msg
    _assert_usable(ps)
    return ps


def _assert_usable(ps: ProfileSet) -> None:
    """What a session does with a profile set before and after boot must not fail on its values."""
    for prof in ps.servers.values():
        argv = prof.command("127.0.0.1", 30000)
        assert all(isinstance(a, str) and "\0" not in a for a in argv)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in {**prof.env_vars, **prof.extra_env}.items())
    replace(SINGLE_STREAM, **ps.workload)  # Workload's own checks agree with the schema's bounds
    assert isinstance(ps.gates, Gates) and ps.gates.alternate_rounds >= 1


def test_serializer_round_trips_the_valid_profile() -> None:
    assert tomllib.loads(dumps(VALID)) == VALID
    assert set(parse_profiles(VALID).servers) == {"base", "spec"}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(_keys, toml_values, max_size=4))
def test_serializer_round_trips_any_value(doc: dict[str, Any]) -> None:
    assume(not any(math.isnan(x) for x in _floats_in(doc)))  # NaN != NaN
    assert tomllib.loads(dumps(doc)) == doc


def _floats_in(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _floats_in(v)]
    if isinstance(value, list):
        return [x for v in value for x in _floats_in(v)]
    return []


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(case=broken_docs())
def test_a_wrong_typed_or_out_of_range_field_is_one_line_naming_it(workdir: Path, case: tuple[dict, str]) -> None:
    doc, field = case
    result = _load_or_one_line(_write(workdir, dumps(doc)))
    assert isinstance(result, str), f"accepted a broken {field}"
    assert field in result, (field, result)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated_docs())
def test_any_mutation_loads_or_is_one_usage_error_line(workdir: Path, doc: dict[str, Any]) -> None:
    loaded = _load_or_one_line(_write(workdir, dumps(doc)))
    if isinstance(loaded, str):  # the same document handed over already parsed fails the same way
        with pytest.raises(UsageError) as err:
            parse_profiles(doc, "doc")
        assert len(str(err.value).splitlines()) == 1
    else:
        _assert_usable(parse_profiles(doc, "doc"))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.one_of(st.sampled_from(sorted(VALID)), _keys), toml_values, max_size=5))
def test_any_toml_document_loads_or_is_one_usage_error_line(workdir: Path, doc: dict[str, Any]) -> None:
    _load_or_one_line(_write(workdir, dumps(doc)))


_VALID_BYTES = dumps(VALID).encode()


def _flip(at: int, byte: int) -> bytes:
    return _VALID_BYTES[:at] + bytes([byte]) + _VALID_BYTES[at + 1:]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=200),
                      st.builds(_flip, st.integers(0, len(_VALID_BYTES) - 1), st.integers(0, 255))))
def test_random_bytes_load_or_are_one_usage_error_line(workdir: Path, data: bytes) -> None:
    _load_or_one_line(_write(workdir, data))


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(case=broken_docs())
def test_profile_show_on_a_broken_file_exits_2_with_one_line(workdir: Path, case: tuple[dict, str]) -> None:
    path = _write(workdir, dumps(case[0]))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["profile", "show", str(path)])
    assert code == EXIT_USAGE and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("specwatch: ")
    assert "Traceback" not in err.getvalue() and case[1] in err.getvalue()


def test_profile_show_process_exits_2_with_one_line(workdir: Path) -> None:
    """The console script itself, in a fresh interpreter: no traceback reaches the terminal."""
    for content in (b'[[server]]\nname = "caf\xff"\n', b'server = "x"\n', bytes(range(256)),
                    dumps(_set(VALID, ("server", 0), "tp", True)).encode()):
        path = _write(workdir, content)
        proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "profile", "show", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == EXIT_USAGE, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    path = _write(workdir, dumps(VALID))
    assert main(["profile", "show", str(path)]) == EXIT_OK
