#!/usr/bin/env bash
# Session 2 GPU stage (2 × H200): tuned against untuned at TP=2 on sockets and on NVLink, both with
# alternating boots (A B A B A B), then the drift gate through pytest on one GPU (record, healthy,
# 8% slowdown). Usage from the repository root: bash docs/validation/gpu_session2.sh WORKDIR
set -u
W=$1; mkdir -p "$W"
source "$(dirname "$0")/stages.sh"
P2=fixtures/profiles/gpu-ref-small-tp2.toml
variant $P2 "$W/socket.toml" 'extra_env = { NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1" }'
sed -i 's/^expect_tuning_effect = false.*/expect_tuning_effect = true/' "$W/socket.toml"
run tp2-socket-tuning 230 -m perf tests/perf/test_gates.py -k tuned --specwatch-profiles "$W/socket.toml" \
    --specwatch-machine-class h200x2-socket --specwatch-report-dir "$W/socket" "${common[@]}"
run tp2-nvlink-tuning 190 -m perf tests/perf/test_gates.py -k tuned --specwatch-profiles $P2 \
    --specwatch-machine-class h200x2-nvlink --specwatch-report-dir "$W/nvlink" "${common[@]}"
P=fixtures/profiles/gpu-ref-small.toml
variant $P "$W/slow8.toml" 'extra_args = ["--ref-fault-slowdown", "8"]'
k=(-m perf tests/perf/test_throughput.py -k "drift and eagle3-tuned" --specwatch-machine-class h200x1)
CUDA_VISIBLE_DEVICES=0 run tp1-record 50 "${k[@]}" --specwatch-profiles $P --update-baselines \
    --specwatch-report-dir "$W/record" "${common[@]}"
CUDA_VISIBLE_DEVICES=0 run tp1-drift-slow8 45 "${k[@]}" --specwatch-profiles "$W/slow8.toml" \
    --specwatch-report-dir "$W/slow8" "${common[@]}"
CUDA_VISIBLE_DEVICES=0 run tp1-drift-healthy 45 "${k[@]}" --specwatch-profiles $P \
    --specwatch-report-dir "$W/healthy" "${common[@]}"
