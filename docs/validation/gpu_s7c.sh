#!/usr/bin/env bash
# Session 7, call C (issues 16 and 19), nvidia-h200-x2:
#   GPU 0 (one H200): the verify-graph rows at concurrency 16 (graphs for batch 1-4 only must fail naming
#     --cuda-graph-max-bs-decode; the healthy server must pass), the reference engine's own test of a batch
#     above the largest captured size, then the ref-small sweep;
#   GPU 1 (one H200, at the same time): the ref-large sweep;
#   then both GPUs, TP=2: `specwatch ab` of ref-small, a ~2% slowdown from outside the server, and A/A,
#     alternating while time is left.
# Run from the repository root: DEADLINE=480 COMMIT=<sha> bash docs/validation/gpu_s7c.sh
source docs/validation/gpu_s7_setup.sh s7c
pt=(python3 -m pytest -p no:cacheprovider -rA --specwatch-commit "${COMMIT:-unknown}")
sweep() {  # name profile limit
  step "$1" "$3" "${pt[@]}" -m perf tests/perf/test_sweep.py --specwatch-profiles "$2" \
    --specwatch-report-dir "$W/$1" --specwatch-results "$W/$1.json" --specwatch-history "$W/history-$1.sqlite"
}
gpu0() {
  export CUDA_VISIBLE_DEVICES=0
  step graphs-c16 130 "${pt[@]}" -m correctness tests/correctness/test_verify_graphs.py \
    --specwatch-profiles fixtures/profiles/gpu-ref-small-graph-bs4.toml --specwatch-report-dir "$W/graphs-c16" \
    --specwatch-history "$W/history-graphs.sqlite"
  step engine-above-captured 90 python3 -m pytest -p no:cacheprovider -rA tests/refserver/test_engine.py \
    -k above_the_largest_captured
  sweep sweep-small fixtures/profiles/gpu-ref-small-sweep.toml 150
}
gpu1() {
  export CUDA_VISIBLE_DEVICES=1
  sweep sweep-large fixtures/profiles/gpu-ref-large-sweep.toml 400
}
gpu0 & gpu1 & wait
# TP=2 A/B: ref-small eagle3-tuned, healthy against healthy and against a GPU sleep after every graph replay
cat > docs/validation/ab/s7-tp2-base.toml <<'EOF'
version = 1
[defaults]
engine = "reference"
model = "ref-small"
device = "cuda"
tp = 2
[[server]]
name = "eagle3-tuned"
env = "tuned"
speculative = { algorithm = "EAGLE3", num_steps = 2, eagle_topk = 1, num_draft_tokens = 3 }
[workload]
runs = 12
max_new_tokens = 256
warmup_s = 1.0
EOF
sed 's|^env = "tuned"|env = "tuned"\npythonpath = ["../../../fixtures/faults/slowdown"]\nextra_env = { SPECWATCH_SLOWDOWN_GPU_CYCLES = "'"${CYCLES_TP2:-30000}"'" }|' \
  docs/validation/ab/s7-tp2-base.toml > docs/validation/ab/s7-tp2-slow.toml
i=0
while (( $(left) > 130 )); do
  i=$((i + 1))
  for pair in slow:s7-tp2-slow.toml same:s7-tp2-base.toml; do
    (( $(left) > 100 )) || break
    name=${pair%%:*}; t=$SECONDS
    timeout -k 10 $(( $(left) - 5 )) python3 -m specwatch.cli ab --base-profile docs/validation/ab/s7-tp2-base.toml \
      --head-profile "docs/validation/ab/${pair#*:}" --rounds 2 --max-rounds 4 --tolerance 0.005 \
      --metric decode_tok_s --round-history "$W/rh" --record-rounds --memo /tmp/abmemo-tp2 -- \
      -m perf tests/perf/test_throughput.py -k "drift and decode" -p no:cacheprovider -q \
      --specwatch-baseline-dir=/tmp/none --specwatch-yardstick=off --specwatch-report-dir=/tmp/reports-tp2 > "$W/ab-tp2-$name-$i.txt" 2>&1
    note "ab tp2 $name $i: exit $? in $(( SECONDS - t )) s; $(grep -E '^\[ab\] (REGRESSION|UNSURE|no regression)' "$W/ab-tp2-$name-$i.txt" | head -1)"
  done
done
note "done"
