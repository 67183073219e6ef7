"""The profile file's schema: one table per TOML table (``SERVER_FIELDS``, ``SPECULATIVE_FIELDS``,
``GATE_FIELDS``, ``WORKLOAD_FIELDS``, ``FIXTURE_FIELDS``, ``TOP_FIELDS``): field name -> rule and meaning.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from specwatch.profiles.schema import (
    BOOLEAN,
    NON_EMPTY,
    STRING,
    Field,
    Invalid,
    Rule,
    array_of,
    check_table,
    choice,
    integer,
    number,
    path_key,
    show,
    text,
)

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass

from specwatch.profiles.profile import (
    ALGORITHMS,
    BUILTIN_ENV_PROFILES,
    ENGINES,
    ENV_APPLY,
    LOAD_APIS,
    PROFILE_FORMAT_VERSION,
    SGLANG_LAUNCHERS,
    Speculative,
)

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: What an environment variable's name may be (POSIX portable names).
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: An HTTP(S) base URL: scheme, host and optional port and path prefix, no spaces.
URL_PATTERN = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
_ROLE_NAMES = ("baseline", "spec", "tuned", "untuned")


NAME = text(NAME_PATTERN, "a name of letters, digits, '.', '_' and '-' starting with a letter or digit, at most "
                          "100 characters (it becomes folder and file names)")


ENV_VALUE = text(expected='a string (quote numbers: NCCL_NTHREADS = "512")', allow_empty=True)


def _env_table(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Invalid(ENV_TABLE.expected, value)
    out: dict[str, str] = {}
    for name, val in value.items():
        if not ENV_NAME_PATTERN.fullmatch(name):
            raise Invalid("", at=f".{path_key(name)}",
                           message=f"{show(name)} is not a valid environment variable name "
                                   "(letters, digits and '_', not starting with a digit)")
        try:
            out[name] = ENV_VALUE.convert(val)
        except Invalid as exc:
            raise exc.under(f".{name}") from None
    return out


ENV_TABLE = Rule('a table of VARIABLE = "value" strings, e.g. { NCCL_P2P_DISABLE = "1" }', _env_table)


SPECULATIVE_FIELDS: dict[str, Field] = {
    "algorithm": Field(choice(*ALGORITHMS, fold_case=True), "SGLang's --speculative-algorithm (any case)"),
    "draft_model": Field(NON_EMPTY, "the draft model's path (--speculative-draft-model-path)"),
    "num_steps": Field(integer(1), "draft steps per cycle"),
    "eagle_topk": Field(integer(1), "branches per draft step (1: a chain)"),
    "num_draft_tokens": Field(integer(2), "tokens verified per cycle; with eagle_topk = 1, num_steps + 1"),
}
_SPECULATIVE_EXPECTED = "a table of speculative settings ({ algorithm = \"EAGLE3\", num_steps = 2 }) or false for none"


def _speculative(value: Any) -> Speculative | None:
    if value is False:  # e.g. a plain-decoding server where [defaults] sets speculative
        return None
    spec = Speculative(**check_table(SPECULATIVE_FIELDS, value, _SPECULATIVE_EXPECTED))
    # num_steps may be unset outside the EAGLE family: then there is no num_steps + 1 to hold it to
    if spec.eagle_topk == 1 and spec.num_steps is not None and spec.num_draft_tokens not in (None, spec.num_steps + 1):
        raise Invalid("", at=".num_draft_tokens",
                       message=f"with eagle_topk = 1 it must be num_steps + 1 = {spec.num_steps + 1}, "
                               f"got {spec.num_draft_tokens}")
    return spec


SERVER_FIELDS: dict[str, Field] = {
    "name": Field(NAME, "the server's name, unique in the file (case-insensitively: it names files)"),
    "engine": Field(choice(*ENGINES), "which server to boot; \"openai\": any OpenAI-compatible server, not booted "
                                      "(reached at url or --specwatch-server-url)"),
    "model": Field(NON_EMPTY, "model path (SGLang) or reference model name (ref-tiny, ref-small, ref-large); "
                              "openai: the served model name (unset: the first id of GET /v1/models)"),
    "api": Field(choice(*LOAD_APIS), "what the load sends: SGLang's /generate (default for reference and sglang), "
                                     "/v1/completions (default for openai) or /v1/chat/completions"),
    "url": Field(text(URL_PATTERN, "an http:// or https:// base URL, e.g. \"http://localhost:8000\""),
                 "engine = \"openai\": where the server answers (--specwatch-server-url overrides it)"),
    "tp": Field(integer(1), "tensor-parallel size"),
    "device": Field(choice("auto", "cpu", "cuda"), "where the server runs"),
    "speculative": Field(Rule(_SPECULATIVE_EXPECTED, _speculative), "speculative decoding; absent or false: none"),
    "env": Field(NAME, "environment profile: tuned, untuned or one from [env_profiles]"),
    "env_apply": Field(choice(*ENV_APPLY), "how the environment profile is applied"),
    "extra_args": Field(array_of(STRING, 'an array of strings, e.g. ["--trust-remote-code"]', hint_for_string=True),
        "arguments appended to the command line, one element per argument (a string is an error, not split)"),
    "extra_env": Field(ENV_TABLE, "variables added to the server's environment"),
    "pythonpath": Field(array_of(NON_EMPTY, "an array of non-empty strings (directories)"),
                        "directories prepended to PYTHONPATH"),
    "launcher": Field(choice(*SGLANG_LAUNCHERS), "how SGLang is started"),
    "python": Field(NON_EMPTY, "the Python interpreter for the reference server and python -m launchers"),
    "max_running_requests": Field(integer(1), "--max-running-requests"),
    "cuda_graph_max_bs": Field(integer(1), "--cuda-graph-max-bs-decode"),
    "decode_log_interval": Field(integer(1), "--decode-log-interval (decode steps between log lines)"),
    "nccl_debug": Field(BOOLEAN, "add NCCL_DEBUG=INFO so that NCCL reports what it applied"),
    "floor_tok_s": Field(number(0, low_open=True), "absolute floor of the median output tok/s"),
    "tolerance": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.05 is 5%"),
                       "drift tolerance against the stored baseline (default: --specwatch-tolerance)"),
}


def _no_name(value: Any) -> Any:
    raise Invalid("", value, message="a name belongs to one [[server]], not to [defaults]")


#: [defaults] holds any server field but the name, which belongs to one server.
DEFAULT_FIELDS: dict[str, Field] = {**SERVER_FIELDS, "name": Field(Rule("no name", _no_name), "not allowed")}

GATE_FIELDS: dict[str, Field] = {
    "spec_margin": Field(number(-1, low_open=True, meaning="speculative ≥ baseline × (1 + margin)"),
                         "how much faster speculation must be; negative allows slower"),
    "spec_ttft_margin": Field(number(0, meaning="speculative TTFT ≤ baseline TTFT × (1 + margin)"),
                              "how much longer speculation may take to the first token (p50 and p99)"),
    "tuned_tolerance": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.02 is 2%"),
                             "tuned ≥ untuned × (1 - tolerance)"),
    "expect_tuning_effect": Field(BOOLEAN, "the tuning must show a significant gain"),
    "tuning_min_effect": Field(number(0, 1, low_open=True, high_open=True, meaning="a fraction: 0.05 is 5%"),
                               "smallest tuned/untuned gain that counts as an effect"),
    "alternate_rounds": Field(integer(1), "fresh-boot rounds A B A B ... of a relative gate"),
    "interleave_runs": Field(BOOLEAN, "both servers of a gate up at once, runs interleaved"),
    "min_crossover_concurrency": Field(integer(1), "speculation must keep paying (its per-level gate passing) "
                                                   "at every swept concurrency below this"),
}

#: The length distributions of [workload] input_words / output_len: field tables per ``dist``.
_LENGTH_DISTS: dict[str, dict[str, Field]] = {
    "uniform": {"low": Field(integer(1), "smallest length"), "high": Field(integer(1), "largest length")},
    "normal": {"mean": Field(number(0, low_open=True), "mean length"), "std": Field(number(0), "standard deviation")},
    "lognormal": {"median": Field(number(0, low_open=True), "median length"),
                  "sigma": Field(number(0), "standard deviation of the length's logarithm")},
}
_LENGTH_REQUIRED = {"uniform": ("low", "high"), "normal": ("mean", "std"), "lognormal": ("median", "sigma")}
_CLIP = {"low": Field(integer(1), "lengths below are raised to it"),
         "high": Field(integer(1), "lengths above are cut to it")}
_LENGTH_EXPECTED = ('an integer ≥ 1 or a distribution table: { dist = "uniform", low = 64, high = 256 }, '
                    '{ dist = "normal", mean = 128, std = 32 } or { dist = "lognormal", median = 128, sigma = 0.5 }')


def _length(value: Any) -> int | dict[str, Any]:
    """A fixed length (an integer) or a checked distribution table (``dist`` and its parameters)."""
    if type(value) is int and value >= 1:
        return value
    if not isinstance(value, dict) or value.get("dist") not in _LENGTH_DISTS:
        if isinstance(value, dict):
            raise Invalid("", at=".dist", message=f"expected one of {', '.join(map(repr, _LENGTH_DISTS))}, "
                                                  f"got {show(value.get('dist'))}")
        raise Invalid(_LENGTH_EXPECTED, value)
    dist = value["dist"]
    fields = {"dist": Field(choice(dist), "the distribution"), **_LENGTH_DISTS[dist],
              **({} if dist == "uniform" else _CLIP)}
    out = check_table(fields, value, _LENGTH_EXPECTED)
    missing = [k for k in _LENGTH_REQUIRED[dist] if k not in out]
    if missing:
        raise Invalid("", message=f"a {dist} distribution needs {' and '.join(missing)}")
    if "high" in out and out["high"] < out.get("low", 1):
        raise Invalid("", at=".high", message=f"must be ≥ low ({out.get('low', 1)}), got {out['high']}")
    return out


#: A request length: fixed, or sampled (seeded) from a distribution.
LENGTH = Rule(_LENGTH_EXPECTED, _length)


def _levels(item: Rule, expected: str) -> Rule:
    """One level or an array of distinct levels, in increasing order, as a tuple."""
    array = array_of(item, expected)

    def convert(value: Any) -> tuple[Any, ...]:
        levels = array.convert(value if isinstance(value, list) else [value])
        if not levels:
            raise Invalid(expected, value)
        if len(set(levels)) != len(levels):
            raise Invalid("", value, message=f"levels repeat: {show(value)}")
        return tuple(sorted(levels))

    return Rule(expected, convert)


#: [workload]: overrides for every workload (the bounds are those Workload itself enforces), the
#: requests' source and lengths, and the load levels of a sweep (``concurrency``, ``request_rate``).
WORKLOAD_FIELDS: dict[str, Field] = {
    "runs": Field(integer(1), "measured runs"),
    "warmup": Field(integer(0), "warmup runs, excluded from samples"),
    "warmup_s": Field(number(0, 600, meaning="seconds"), "keep warming up until this much load has passed"),
    "min_duration_s": Field(number(0, 3600, meaning="seconds"), "keep measuring until this much time has passed"),
    "max_new_tokens": Field(integer(1), "tokens per request"),
    "dataset": Field(NON_EMPTY, '"builtin" (specwatch\'s prompt set), or a JSONL file ("prompt" or chat '
                                '"messages" per line) or ShareGPT JSON; relative to the profile file\'s folder'),
    "categories": Field(array_of(NON_EMPTY, "an array of category names"), "only the dataset's entries of these "
                                                                           "categories"),
    "input_words": Field(LENGTH, "prompt length in words (cut, or the prompt repeated), fixed or a distribution"),
    "output_len": Field(LENGTH, "tokens per request, fixed or a distribution (overrides max_new_tokens)"),
    "seed": Field(integer(0), "seed of the prompt sampling, the lengths and the arrivals"),
    "run_requests": Field(integer(1), "requests per run of a sweep level (default: max(concurrency, 8), never "
                                      "below the concurrency; a request-rate level: 4 s worth, at least 8)"),
    "concurrency": Field(_levels(integer(1), "an integer ≥ 1 or an array of them, e.g. [1, 4, 16, 64]"),
                         "the concurrency levels of a sweep (requests in flight)"),
    "request_rate": Field(_levels(number(0, low_open=True), "a number > 0 or an array of them, e.g. [2.0, 8.0]"),
                          "the request-rate levels of a sweep (Poisson arrivals, requests/s)"),
}


FIXTURE_FIELDS: dict[str, Field] = {
    role: Field(text(expected="a server name (a string)"), f"the server the {role} fixture means")
    for role in _ROLE_NAMES
}


def _env_profiles(value: Any) -> dict[str, dict[str, str]]:
    if not isinstance(value, dict):
        raise Invalid(ENV_PROFILES.expected, value)
    out = {}
    for name, table in value.items():
        if name in BUILTIN_ENV_PROFILES:
            raise Invalid("", at=f".{name}", message=f"{name!r} is built in ({', '.join(BUILTIN_ENV_PROFILES)}: "
                                                      "the case study's tuning and none); choose another name")
        if not NAME_PATTERN.fullmatch(name):
            raise Invalid("", at=f".{path_key(name)}", message=f"expected {NAME.expected}, got {show(name)}")
        try:
            out[name] = ENV_TABLE.convert(table)
        except Invalid as exc:
            raise exc.under(f".{name}") from None
    return out


ENV_PROFILES = Rule('tables of environment profiles: [env_profiles.NAME] with VARIABLE = "value"', _env_profiles)


def _servers(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Invalid('an array of tables: [[server]] entries with name = "..."', value)
    if not value:
        raise Invalid("", message="no [[server]] entries")
    return value


def _version(value: Any) -> int:
    if type(value) is not int or value != PROFILE_FORMAT_VERSION:
        raise Invalid(f"{PROFILE_FORMAT_VERSION} (the profile format this specwatch reads)", value)
    return value


TOP_FIELDS: dict[str, Field] = {
    "version": Field(Rule(str(PROFILE_FORMAT_VERSION), _version), "profile format version"),
    "defaults": Field(Rule("a table of server fields applied to every [[server]]",
                           lambda v: check_table(DEFAULT_FIELDS, v, "a table of server fields applied to every "
                                                                    "[[server]]")), "server fields for every server"),
    "env_profiles": Field(ENV_PROFILES, "named environment profiles"),
    "server": Field(Rule("[[server]] tables", _servers), "the servers (checked one by one against SERVER_FIELDS)"),
    "fixtures": Field(Rule("a table of fixture = \"server name\"",
                           lambda v: check_table(FIXTURE_FIELDS, v, 'a table of fixture = "server name"')),
                      "which server each named fixture means"),
    "gates": Field(Rule("a table of gate settings", lambda v: check_table(GATE_FIELDS, v, "a table of gate settings")),
                   "relative gates"),
    "workload": Field(Rule("a table of workload settings",
                           lambda v: check_table(WORKLOAD_FIELDS, v, "a table of workload settings")),
                      "overrides for every workload"),
}


