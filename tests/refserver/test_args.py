"""Command-line parsing and SGLang-style resolution of the reference server (no server booted)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from refharness import SRC, server_env

if str(SRC) not in sys.path:  # the package may not be installed in the test environment
    sys.path.insert(0, str(SRC))

from specwatch.refserver import args as ra

SPEC_48 = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48]


def resolve(argv: list[str], *, cuda: bool = False, mem: float = 139.0) -> ra.ServerArgs:
    return ra.resolve(ra.build_parser().parse_args(argv), cuda_available=cuda, gpu_mem_gb=mem)


def run_cli(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specwatch.refserver", *argv], capture_output=True,
                          text=True, env=server_env(), timeout=60)


def test_unknown_flag_is_named_and_exits_2() -> None:
    res = run_cli(["--model-path", "ref-tiny", "--no-such-flag", "3"])
    assert res.returncode == 2
    assert "--no-such-flag" in res.stderr


def test_topk_other_than_one_is_a_clear_error() -> None:
    res = run_cli(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"])
    assert res.returncode == 2
    assert "--speculative-eagle-topk 4" in res.stderr
    assert "use 1" in res.stderr
    with pytest.raises(ra.ArgError, match="topk"):
        resolve(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2", "--speculative-eagle-topk", "2"])


def test_unknown_preset_is_rejected_before_spawning() -> None:
    res = run_cli(["--model-path", "no-such-model"])
    assert res.returncode == 2
    assert "no-such-model" in res.stderr


def test_help_documents_fault_switches() -> None:
    text = ra.build_parser().format_help()
    for flag in ("FAULT SWITCHES", "--ref-fault-eager-verify", "--ref-fault-slowdown", "--ref-fault-diverge",
                 "--ref-fault-drop-env"):
        assert flag in text
    assert "FAULT SWITCHES" in (ra.__doc__ or "")


def test_draft_tokens_forced_to_steps_plus_one_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        a = resolve(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"])
    assert a.speculative_num_draft_tokens == 4
    assert any("speculative_num_draft_tokens is adjusted" in r.getMessage() for r in caplog.records)
    b = resolve(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2"])
    assert (b.speculative_eagle_topk, b.speculative_num_draft_tokens) == (1, 3)


def test_spec_defaults_and_algorithm_names(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        a = resolve(["--speculative-algorithm", "nextn"])
    assert a.speculative_algorithm == "EAGLE"
    assert a.max_running_requests == 48
    assert any("Max running requests is reset to 48 for speculative decoding" in r.getMessage()
               for r in caplog.records)
    assert (a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens) == (3, 1, 4)
    assert resolve(["--speculative-algorithm", "eagle3"]).speculative_algorithm == "EAGLE3"
    assert resolve(["--speculative-algorithm", "EAGLE", "--max-running-requests", "7"]).max_running_requests == 7
    with pytest.raises(ra.ArgError, match="NGRAM"):
        resolve(["--speculative-algorithm", "NGRAM"])
    assert resolve([]).max_running_requests == ra.NONSPEC_DEFAULT_MAX_RUNNING


def test_tp_prefix_host_default_and_device() -> None:
    a = resolve(["--tp", "2"])
    assert a.tp_size == 2
    assert a.host == "127.0.0.1"
    assert a.decode_log_interval == 40
    assert (a.device, a.dtype) == ("cpu", "float32")
    c = resolve([], cuda=True)
    assert (c.device, c.dtype) == ("cuda", "bfloat16")


def test_capture_list_follows_sglang() -> None:
    assert ra.capture_bs(True, 256, 48) == SPEC_48
    assert ra.capture_bs(True, 32, 48) == SPEC_48[: SPEC_48.index(32) + 1]
    assert ra.capture_bs(True, 25, 48) == [*SPEC_48[: SPEC_48.index(24) + 1], 25]  # the size is appended
    assert ra.capture_bs(True, 256, 100)[-4:] == [80, 88, 96, 100]
    assert ra.capture_bs(False, 256, 20) == [1, 2, 4, 8, 12, 16, 20]
    # Resolution on an H200-sized GPU with EAGLE defaults captures up to 48 (every batch graphable).
    a = resolve(["--speculative-algorithm", "EAGLE3"], cuda=True, mem=139.0)
    assert a.cuda_graph_max_bs_decode == 256
    assert a.cuda_graph_bs == SPEC_48
    # --max-running-requests above --cuda-graph-max-bs-decode: large batches verify eagerly.
    b = resolve(["--speculative-algorithm", "EAGLE3", "--cuda-graph-max-bs-decode", "16",
                 "--max-running-requests", "32"], cuda=True)
    assert b.cuda_graph_bs[-1] == 16
    assert b.max_running_requests == 32
    assert resolve(["--speculative-algorithm", "EAGLE3"], cuda=True, mem=16.0).cuda_graph_bs == SPEC_48[:8]


def test_capture_limit_flags_of_0_5_23() -> None:
    """--cuda-graph-max-bs-decode 4 below --max-running-requests 16 captures 1-4 only (the fault row's
    server); --cuda-graph-bs-decode lists the sizes, its largest becomes the limit (memory_hook.py)."""
    a = resolve(["--speculative-algorithm", "EAGLE3", "--cuda-graph-max-bs-decode", "4",
                 "--max-running-requests", "16"], cuda=True)
    assert (a.cuda_graph_bs, a.max_running_requests) == ([1, 2, 3, 4], 16)
    assert a.cuda_graph_config["decode"]["max_bs"] == 4
    b = resolve(["--speculative-algorithm", "EAGLE3", "--cuda-graph-bs-decode", "1", "2", "4",
                 "--max-running-requests", "16"], cuda=True)
    assert (b.cuda_graph_bs, b.cuda_graph_max_bs_decode, b.cuda_graph_bs_decode) == ([1, 2, 4], 4, [1, 2, 4])
    c = resolve(["--cuda-graph-bs-decode", "1", "64", "--max-running-requests", "16"], cuda=True)
    assert c.cuda_graph_bs == [1, 16]  # cut to the request pool, which is added (base_cuda_graph_runner.py)
    assert ra.capture_bs(False, 640, 640)[-4:] == [544, 576, 608, 640]  # 32 apart above 512
    with pytest.raises(ra.ArgError, match="--cuda-graph-bs-decode"):
        resolve(["--cuda-graph-bs-decode", "0", "4"], cuda=True)


def test_graphs_disabled_on_cpu_and_by_flags(caplog: pytest.LogCaptureFixture) -> None:
    assert resolve(["--speculative-algorithm", "EAGLE3"]).cuda_graph_bs == []  # CPU
    assert resolve(["--cuda-graph-backend-decode", "disabled"], cuda=True).cuda_graph_bs == []
    assert resolve(["--disable-decode-cuda-graph"], cuda=True).cuda_graph_bs == []
    with caplog.at_level(logging.WARNING):
        a = resolve(["--disable-cuda-graph"], cuda=True)
    assert a.cuda_graph_bs == []
    assert a.cuda_graph_backend_decode == "disabled"
    assert any("deprecated" in r.getMessage() for r in caplog.records)
    with pytest.raises(SystemExit):
        ra.build_parser().parse_args(["--cuda-graph-backend-decode", "breakable"])


def test_drop_env_prefix_only_touches_the_worker_env() -> None:
    a = resolve(["--ref-fault-drop-env", "NCCL_", "--ref-fault-drop-env", "FOO"])
    env = ra.worker_env(a, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "FOOBAR": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}
    assert ra.worker_env(resolve([]), {"NCCL_ALGO": "Ring"}) == {"NCCL_ALGO": "Ring"}


def test_shipped_reference_profiles_boot_commands_parse_and_name_known_presets() -> None:
    """Every reference-server profile under fixtures/profiles/ produces a command line the server
    accepts (resolved as on a GPU host) for a preset that exists and divides by its TP size."""
    from specwatch.profiles.loading import load_profiles
    from specwatch.refserver.preset import get_preset

    root = SRC.parent / "fixtures" / "profiles"
    seen = 0
    for path in sorted(root.glob("*.toml")):
        for prof in load_profiles(path).servers.values():
            if prof.engine != "reference":
                continue
            argv = prof.command("127.0.0.1", 30000)
            cli = argv[argv.index("specwatch.refserver") + 1:]
            args = resolve(cli, cuda=True)
            preset = get_preset(args.model_path)
            assert preset.n_heads % args.tp_size == 0 and preset.d_ff % args.tp_size == 0, (path.name, prof.name)
            seen += 1
    assert seen >= 12  # ref-small (1 and 2 GPUs), ref-large (1 GPU, sockets)
