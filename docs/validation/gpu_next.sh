#!/usr/bin/env bash
# What issue 7 still needs, ready for the next session's device time (nvidia-h200-x2), one stage
# per call. Run from the repository root with the setproctitle wheel installed and
# PYTHONPATH=/tmp/site:$PWD/src (docs/validation/README.md, "How it was run"):
#   W=$OUT/n1 bash docs/validation/gpu_next.sh tenpct    # 19-of-20 row: 0 / 10% repetitions, ~520 s
#   W=$OUT/n2 bash docs/validation/gpu_next.sh record1   # ref-small h200x1 baselines at 256 tokens, matrix timed
#   W=$OUT/n3 bash docs/validation/gpu_next.sh socket    # ref-small TP=2 over sockets, runs interleaved
#   W=$OUT/n3 bash docs/validation/gpu_next.sh record2   # ref-small h200x2-nvlink baselines (BUDGET: seconds left)
#   W=$OUT/n5 bash docs/validation/gpu_next.sh correct2  # tests/correctness at TP=2, then on one GPU
#   W=$OUT/n6 bash docs/validation/gpu_next.sh matrix2   # the TP=2 perf matrix timed, one more baseline session
#   W=$OUT/n9 bash docs/validation/gpu_next.sh allreduce # specwatch allreduce on NVLink and over sockets, ~4 min
# Session 5 ran correct2 and matrix2 (docs/validation/README.md, section 9). Still worth a call:
# matrix2 again, to time the 10-boot matrix (a server shared by both gates boots once a round), and
# record1 for more h200x1 sessions of the untuned profiles (give each GPU's run 400 s: two at once
# take about 330 s), then allreduce: the all-reduce probe (specwatch allreduce), run on CPU only so far.
# The device returns a limited number of files per call: end the call with
#   cd $OUT && tar czf n5.tgz n5 && rm -rf n5
# Tested on CPU with P / P2 pointing at CPU variants of the profile sets.
set -u
stage=${1:?usage: gpu_next.sh tenpct|record1|record2|socket|correct2|matrix2|allreduce}
W=${W:?set W to the output folder}; mkdir -p "$W"
source "$(dirname "$0")/stages.sh"
PL=${PL:-fixtures/profiles/gpu-ref-large.toml}
P=${P:-fixtures/profiles/gpu-ref-small.toml}
P2=${P2:-fixtures/profiles/gpu-ref-small-tp2.toml}
BUDGET=${BUDGET:-470}

if [ "$stage" = tenpct ]; then
  # One boot per repetition on each GPU at once; judge with
  #   drift_analysis.py data/session3/drift-large-gpu{0,1}-c.json (leave-one-out sessions rule)
  for g in 0 1; do
    python3 docs/validation/drift_experiment.py --profiles $PL --profile large-eagle3-tuned --gpu $g \
      --baseline-boots 0 --reps 40 --levels 0,10 --budget-s "$BUDGET" --seed $((7 + g)) \
      --out "$W/drift-large-gpu$g-c.json" > "$W/drift-large-gpu$g-c.log" 2>&1 &
  done
  wait
fi

if [ "$stage" = record1 ]; then
  # h200x1: the whole default matrix on each GPU at once (its wall time is the matrix's cost), then
  # floors/drift-only sessions on both GPUs while the call's time lasts. Every results file is
  # merged into baselines/ afterwards, on the workstation (`specwatch baseline update`).
  for g in 0 1; do
    CUDA_VISIBLE_DEVICES=$g run x1-g$g 420 -m perf tests/perf --specwatch-profiles $P --update-baselines \
      --specwatch-report-dir "$W/x1-g$g" "${common[@]}" --specwatch-baseline-dir "$W/scratch-g$g" \
      --specwatch-history "$W/history-g$g.sqlite" &
  done
  wait
  k=1
  while [ $((SECONDS + 130)) -lt "$BUDGET" ]; do
    for g in 0 1; do
      CUDA_VISIBLE_DEVICES=$g run x1-g$g-s$k 200 -m perf tests/perf/test_throughput.py --specwatch-profiles $P \
        --update-baselines --specwatch-report-dir "$W/x1-g$g-s$k" "${common[@]}" \
        --specwatch-baseline-dir "$W/scratch-g$g" --specwatch-history "$W/history-g$g.sqlite" &
    done
    wait; k=$((k + 1))
  done
fi

if [ "$stage" = record2 ]; then
  # h200x2-nvlink: sessions of the TP=2 set (floors, drift and the speculation gate) while time lasts.
  k=1
  while [ $((SECONDS + 170)) -lt "$BUDGET" ]; do
    run x2-s$k 240 -m perf tests/perf -k "not test_tuned" --specwatch-profiles $P2 --update-baselines \
      --specwatch-report-dir "$W/x2-s$k" "${common[@]}" --specwatch-baseline-dir "$W/scratch-x2"
    k=$((k + 1))
  done
fi

if [ "$stage" = correct2 ]; then
  # The correctness suite (fault table included) at TP=2 on the NVLink pair, then again on one GPU
  # with the current code (session 1 ran it on one GPU only).
  run correct-tp2 330 -m correctness tests/correctness --specwatch-profiles $P2 --specwatch-report-dir "$W/c2" \
    "${common[@]}"
  CUDA_VISIBLE_DEVICES=0 run correct-tp1 240 -m correctness tests/correctness --specwatch-profiles $P \
    --specwatch-report-dir "$W/c1" "${common[@]}"
fi

if [ "$stage" = matrix2 ]; then
  # The whole TP=2 matrix, timed (3 alternating rounds: about 6 minutes estimated), recording a
  # session for the h200x2-nvlink baselines; merge results on the workstation.
  run matrix-tp2 560 -m perf tests/perf --specwatch-profiles $P2 --update-baselines \
    --specwatch-report-dir "$W/m2" "${common[@]}"
fi

if [ "$stage" = allreduce ]; then
  # The tuning's effect on the all-reduce itself, graphed, under each server's environment: NVLink
  # (device-facts: within 1.5%) and sockets (about 11% at 14 KB).
  for f in gpu-ref-small-tp2 gpu-ref-large-tp2-socket; do
    t0=$SECONDS
    timeout 290 "${PYTHON:-python3}" -m specwatch.cli allreduce fixtures/profiles/$f.toml --rounds 6 \
      > "$W/allreduce-$f.txt" 2>&1
    echo "allreduce $f: exit $? in $((SECONDS - t0)) s" | tee -a "$W/stages.txt"
  done
fi

if [ "$stage" = socket ]; then
  variant $P2 "$W/socket.toml" 'extra_env = { NCCL_P2P_DISABLE = "1", NCCL_SHM_DISABLE = "1" }'
  sed -i 's/^expect_tuning_effect = false.*/expect_tuning_effect = true/; s/^alternate_rounds = .*/alternate_rounds = 2/' \
    "$W/socket.toml"
  printf 'interleave_runs = true\ntuning_min_effect = 0.03\n' >> "$W/socket.toml"
  run tp2-socket-small 400 -m perf tests/perf/test_gates.py -k tuned --specwatch-profiles "$W/socket.toml" \
    --specwatch-machine-class h200x2-socket --specwatch-report-dir "$W/socket" "${common[@]}"
fi
true
