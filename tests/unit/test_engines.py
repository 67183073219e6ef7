"""The engines part: each engine answers the Protocol, SGLang's versions, the registry, and a check that
asks for capabilities rather than an engine."""

from __future__ import annotations

import typing
from dataclasses import replace

import pytest

from specwatch.checks import accept_length, environment, lossless_live, verify_graphs
from specwatch.engines import protocol, sglang
from specwatch.engines.protocol import CAPABILITIES, Capabilities, Engine
from specwatch.engines.registry import ENGINES, NATIVE, bootable, bundled, engine_for, find, signatures, unable
from specwatch.errors import UsageError
from specwatch.profiles.profile import ServerProfile, Speculative
from specwatch.signals import procenv
from specwatch.signals.procenv import ProcInfo
from specwatch.store.machine import ENGINE_PACKAGES, SERVED_VERSION_ENGINES

MEMBERS = [n for n in typing.get_type_hints(Engine) if not n.startswith("_")] + ["arg_pieces", "command"]


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_engine_answers_every_member_of_the_protocol(name: str) -> None:
    engine = ENGINES[name]
    missing = [m for m in MEMBERS if not hasattr(engine, m)]
    assert not missing and engine.name == name
    assert engine.load_apis and isinstance(engine.capabilities, Capabilities)
    if engine.capabilities.metrics or engine.capabilities.graph_counters:
        assert engine.metrics is not None and engine.metrics.graph_passes.startswith(engine.metrics.prefix)
    if engine.capabilities.process_tree:
        assert engine.process is not None and engine.process.tree_name and engine.process.title_prefix
    if engine.capabilities.decode_lines:
        assert engine.log_format is not None


def test_the_registry_names_the_engines_in_the_schema_order_and_refuses_an_unknown_one() -> None:
    assert tuple(ENGINES) == ("reference", "sglang", "openai") and bootable() == ("reference", "sglang")
    assert engine_for("sglang") is NATIVE and find("vllm") is None and find(None) is None
    with pytest.raises(UsageError, match="unknown engine 'vllm'; known: reference, sglang, openai"):
        engine_for("vllm")
    assert bundled("reference") and not bundled("sglang") and not bundled("tgi")
    assert ENGINE_PACKAGES == {"reference": "specwatch", "sglang": "sglang"}
    assert set(SERVED_VERSION_ENGINES) == {"sglang"}


def test_each_sglang_version_is_described_by_the_newest_release_at_or_below_it() -> None:
    assert sglang.release().version == "0.5.23" and sglang.release(None).capture_bs_line == "end"
    assert sglang.release("0.5.16").capture_bs_line == "begin" and not sglang.release("0.5.16").graph_memory_metric
    assert sglang.release("0.5.20").version == "0.5.17"  # between known versions: the older one's facts
    assert sglang.release("0.5.23.post1").version == "0.5.23" and sglang.release("0.6.0").version == "0.5.23"
    assert sglang.release("0.4.9").version == "0.5.12" and sglang.release("0.5.15").version == "0.5.15.post1"
    assert "--cuda-graph-max-bs" in sglang.release("0.5.17").graph_limit_flags
    assert sglang.release("0.5.23").graph_limit_flags == ("--cuda-graph-max-bs-decode",)  # the alias is ambiguous
    # 0.5.12 and 0.5.13 know only --cuda-graph-max-bs; from 0.5.14 on the canonical spelling is the same
    assert {r.version for r in sglang.RELEASES if r.graph_limit_flag == "--cuda-graph-max-bs"} == {"0.5.12", "0.5.13"}
    assert {r.graph_limit_flag for r in sglang.RELEASES[2:]} == {"--cuda-graph-max-bs-decode"}
    assert NATIVE.versions == ("0.5.12", "0.5.13", "0.5.14", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.23")


def test_the_command_line_is_the_engines_and_the_same_for_every_known_sglang_version() -> None:
    prof = ServerProfile("s", engine="sglang", model="m", cuda_graph_max_bs=8,
                         speculative=Speculative(draft_model="d", num_steps=2))
    argv = prof.command("h", 1)
    assert argv == NATIVE.command(prof, "h", 1) == NATIVE.command(prof, "h", 1, version="0.5.16")
    assert argv[:2] == ["sglang", "serve"] and "--cuda-graph-max-bs-decode" in argv
    assert argv[argv.index("--speculative-eagle-topk") + 1] == "1"  # SGLang needs it with num_steps
    ref = replace(prof, engine="reference", model="ref-tiny", speculative=Speculative(num_steps=2))
    argv = ref.command("h", 1)
    assert argv[1:3] == ["-m", "specwatch.refserver"] and "--speculative-eagle-topk" not in argv
    assert argv[argv.index("--device") + 1] == "auto"


def test_an_openai_compatible_server_is_never_booted_and_lacks_every_capability() -> None:
    prof = ServerProfile("v", engine="openai", model="")
    with pytest.raises(UsageError, match="v: engine = 'openai' is a server specwatch does not boot"):
        prof.command("h", 1)
    assert engine_for("openai").capabilities.missing(CAPABILITIES) == list(CAPABILITIES)
    assert prof.arg_pieces("h", 1) == [] and prof.gpus_needed == 0 and prof.load_api == "completions"


def test_a_check_asks_for_capabilities_and_an_engine_with_some_of_them_runs_what_it_can() -> None:
    """An engine with /metrics and a process tree but no meta_info (as vLLM would be): the environment check
    may run, the accept-length, lossless and verify-graph checks skip with the reason."""
    partial = Capabilities(boots=True, native_api=False, metrics=True, decode_lines=False, meta_info=False,
                           graph_counters=False, process_tree=True)
    other = type("Other", (), {"name": "other", "title": "another server", "capabilities": partial})()
    assert unable(other, environment.NAME, environment.NEEDS, "p", "completions") is None
    for check in (accept_length, lossless_live, verify_graphs):
        why = unable(other, check.NAME, check.NEEDS, "p", "completions")
        assert why and f"{check.NAME} is an SGLang-only check" in why and "p is engine = 'other'" in why
    with pytest.raises(ValueError, match="unknown capabilities"):
        partial.missing(("telepathy",))


def test_process_titles_and_launches_come_from_the_engines_signatures() -> None:
    for sig in (s for s in signatures() if s.tree_name):
        for role in sig.roles:
            title = f"{sig.title_prefix}{role}_TP1"
            got = procenv.classify(ProcInfo(1, 0, title[:15], [title, "", ""]))
            assert got.engine == sig.tree_name and got.ranks == {"TP": 1}
        for module in sig.modules:
            assert procenv.classify(ProcInfo(1, 0, "python3", ["python3", "-m", module])).engine == sig.tree_name
    assert procenv.classify(ProcInfo(1, 0, "sglang", ["/venv/bin/sglang", "serve", "--model-path", "m"])).role == "main"


def test_the_protocol_module_lists_what_it_defines() -> None:
    assert sorted(protocol.__all__) == sorted(["CAPABILITIES", "Capabilities", "Engine", "Identity", "MetricNames",
                                               "PhaseGraphs", "Pieces", "ProcessSignature", "ServerProfile",
                                               "SpeculativeSettings"])


def test_a_profile_is_what_an_engine_reads() -> None:
    """engines/ types a profile structurally (no import of profiles/, so no cycle): the real one fits."""
    from specwatch.profiles.profile import ServerProfile, Speculative

    prof: protocol.ServerProfile = ServerProfile(name="p", speculative=Speculative(num_steps=2))
    assert prof.speculative is not None and prof.speculative.num_steps == 2
    assert all(hasattr(prof, m) for m in ("model", "tp", "device", "extra_args", "launcher", "python",
                                          "max_running_requests", "cuda_graph_max_bs", "decode_log_interval"))
