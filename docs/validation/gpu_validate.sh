#!/usr/bin/env bash
# GPU validation of specwatch against the reference server (docs/validation/README.md has the results).
# Usage on the GPU host, from the repository root:  bash docs/validation/gpu_validate.sh STAGE WORKDIR
#   tp1:  one H200: the perf and correctness suites on ref-small, recording h200x1 baselines, then the
#         drift gate against them with a real 8% slowdown (--ref-fault-slowdown 8) and without it.
#   final: after the workload change to repeated prompts: record both machine classes' baselines,
#         then 3 repetitions each of the drift gate with and without the 8% slowdown, then the
#         socket-transport tuning comparison.
#   tp2:  two H200s (NVLink), tensor parallel 2: the perf suite, recording h200x2-nvlink baselines; then
#         tuned against untuned with NCCL forced onto sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1).
set -u
stage=$1; W=$2; mkdir -p "$W"
source "$(dirname "$0")/stages.sh"
if [ "$stage" = tp1 ]; then
  export CUDA_VISIBLE_DEVICES=0
  P=fixtures/profiles/gpu-ref-small.toml
  run tp1-suite 330 -m "perf or correctness" tests/perf tests/correctness --specwatch-profiles $P \
      --specwatch-machine-class h200x1 --update-baselines --specwatch-runs 10 --specwatch-report-dir "$W/tp1" "${common[@]}"
  variant $P "$W/slow8.toml" 'extra_args = ["--ref-fault-slowdown", "8"]'
  run tp1-drift-slow8 100 -m perf tests/perf/test_throughput.py -k "drift and eagle3-tuned" --specwatch-profiles "$W/slow8.toml" \
      --specwatch-machine-class h200x1 --specwatch-runs 10 --specwatch-report-dir "$W/slow8" "${common[@]}"
  run tp1-drift-healthy 100 -m perf tests/perf/test_throughput.py -k "drift and eagle3-tuned" --specwatch-profiles $P \
      --specwatch-machine-class h200x1 --specwatch-runs 10 --specwatch-report-dir "$W/healthy" "${common[@]}"
fi
if [ "$stage" = tp2 ]; then
  P=fixtures/profiles/gpu-ref-small-tp2.toml
  run tp2-suite 300 -m perf tests/perf --specwatch-profiles $P --specwatch-machine-class h200x2-nvlink \
      --update-baselines --specwatch-runs 10 --specwatch-report-dir "$W/tp2" "${common[@]}"
  variant $P "$W/socket.toml" 'extra_env = { NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1" }'
  sed -i 's/^expect_tuning_effect = false.*/expect_tuning_effect = true/' "$W/socket.toml"
  run tp2-socket-tuning 240 -m perf tests/perf/test_gates.py -k tuned --specwatch-profiles "$W/socket.toml" \
      --specwatch-machine-class h200x2-socket --specwatch-runs 12 --specwatch-report-dir "$W/socket" "${common[@]}"
fi
if [ "$stage" = final ]; then
  P=fixtures/profiles/gpu-ref-small.toml
  CUDA_VISIBLE_DEVICES=0 run tp1-record 120 -m perf tests/perf --specwatch-profiles $P --specwatch-machine-class h200x1 \
      --update-baselines --specwatch-runs 10 --specwatch-report-dir "$W/tp1" "${common[@]}"
  variant $P "$W/slow8.toml" 'extra_args = ["--ref-fault-slowdown", "8"]'
  for i in 1 2 3; do
    CUDA_VISIBLE_DEVICES=0 run tp1-drift-slow8-$i 60 -m perf tests/perf/test_throughput.py -k "drift and eagle3-tuned" \
        --specwatch-profiles "$W/slow8.toml" --specwatch-machine-class h200x1 --specwatch-runs 10 \
        --specwatch-report-dir "$W/slow8-$i" "${common[@]}"
    CUDA_VISIBLE_DEVICES=0 run tp1-drift-healthy-$i 60 -m perf tests/perf/test_throughput.py -k "drift and eagle3-tuned" \
        --specwatch-profiles $P --specwatch-machine-class h200x1 --specwatch-runs 10 \
        --specwatch-report-dir "$W/healthy-$i" "${common[@]}"
  done
  P2=fixtures/profiles/gpu-ref-small-tp2.toml
  run tp2-record 130 -m perf tests/perf --specwatch-profiles $P2 --specwatch-machine-class h200x2-nvlink \
      --update-baselines --specwatch-runs 10 --specwatch-report-dir "$W/tp2" "${common[@]}"
  variant $P2 "$W/socket.toml" 'extra_env = { NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1" }'
  sed -i 's/^expect_tuning_effect = false.*/expect_tuning_effect = true/' "$W/socket.toml"
  run tp2-socket-tuning 90 -m perf tests/perf/test_gates.py -k tuned --specwatch-profiles "$W/socket.toml" \
      --specwatch-machine-class h200x2-socket --specwatch-runs 12 --specwatch-report-dir "$W/socket" "${common[@]}"
fi
