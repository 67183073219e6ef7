#!/usr/bin/env bash
# Session 7, call B (issue 19): two H200s at TP=2 (nvidia-h200-x2). In order, each step with its own limit:
#   1. the yardstick on each GPU;
#   2. drift of the shipped TP=2 set against the committed h200x2-nvlink baselines (NVLink);
#   3. the concurrency sweep of ref-small at TP=2, per-level verdicts and the crossover;
#   4. the verify-graph fault row at concurrency 16 at TP=2 (graphs captured for batch 1-4 only) and the
#      healthy server at the same load;
#   5. over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): `specwatch allreduce` (ref-small and ref-large
#      TP=2 profiles), then the ref-small sweep again;
#   6. the ref-large sweep at TP=2 (NVLink) while time is left.
# Run from the repository root: DEADLINE=540 COMMIT=<sha> bash docs/validation/gpu_s7b.sh
source docs/validation/gpu_s7_setup.sh s7b
variant() {  # base profile, output, extra TOML line for [defaults]
  awk -v extra="$3" '{print} /^\[defaults\]/{print extra}' "$1" > "$2"
}
pt=(python3 -m pytest -p no:cacheprovider -rA --specwatch-commit "${COMMIT:-unknown}")
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g step yardstick-gpu$g 60 python3 -m specwatch.load.yardstick --json
done
step drift-tp2 170 "${pt[@]}" -m perf tests/perf/test_throughput.py -k drift \
  --specwatch-profiles fixtures/profiles/gpu-ref-small-tp2.toml --specwatch-report-dir "$W/drift-tp2" \
  --specwatch-results "$W/drift-tp2.json" --specwatch-history "$W/history.sqlite"
variant fixtures/profiles/gpu-ref-small-sweep.toml fixtures/profiles/s7-small-sweep-tp2.toml 'tp = 2'
variant fixtures/profiles/gpu-ref-large-sweep.toml fixtures/profiles/s7-large-sweep-tp2.toml 'tp = 2'
variant fixtures/profiles/gpu-ref-small-graph-bs4.toml fixtures/profiles/s7-graph-bs4-tp2.toml 'tp = 2'
sweep() {  # name profile limit [env...]
  local name=$1 prof=$2 limit=$3; shift 3
  step "$name" "$limit" env "$@" "${pt[@]}" -m perf tests/perf/test_sweep.py --specwatch-profiles "$prof" \
    --specwatch-report-dir "$W/$name" --specwatch-results "$W/$name.json" --specwatch-history "$W/history.sqlite"
}
sweep sweep-small-tp2 fixtures/profiles/s7-small-sweep-tp2.toml 150
step graphs-c16-tp2 130 "${pt[@]}" -m correctness tests/correctness/test_verify_graphs.py \
  --specwatch-profiles fixtures/profiles/s7-graph-bs4-tp2.toml --specwatch-report-dir "$W/graphs-c16-tp2" \
  --specwatch-history "$W/history.sqlite"
sock=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)
(( $(left) > 80 )) && step allreduce-small-sock 75 env "${sock[@]}" python3 -m specwatch.cli allreduce \
  fixtures/profiles/gpu-ref-small-tp2.toml --rounds 4 --timeout 30
(( $(left) > 80 )) && step allreduce-small-nvlink 75 python3 -m specwatch.cli allreduce \
  fixtures/profiles/gpu-ref-small-tp2.toml --rounds 4 --timeout 30
(( $(left) > 80 )) && step allreduce-large-sock 75 env "${sock[@]}" python3 -m specwatch.cli allreduce \
  fixtures/profiles/gpu-ref-large-tp2-socket.toml --rounds 4 --timeout 30
(( $(left) > 150 )) && sweep sweep-small-tp2-sock fixtures/profiles/s7-small-sweep-tp2.toml 140 "${sock[@]}"
(( $(left) > 150 )) && sweep sweep-large-tp2 fixtures/profiles/s7-large-sweep-tp2.toml $(( $(left) - 10 ))
note "done"
