#!/usr/bin/env bash
# Session 3, call 2 (nvidia-h200-x2): the drift gate on ref-large, through pytest and by repetition.
#  - GPU 1 at once: more drift repetitions (0 / 6 / 8 % in shuffled order, one boot each);
#  - GPU 0: issue 5's check through pytest. Record one session (--update-baselines), add call 1's 15
#    healthy boots (both GPUs) to the same baseline, oldest first, the pytest session last; then
#    8 % slowdown, healthy rerun, 8 % slowdown, healthy rerun, each judged by the drift gate; then
#    drift repetitions with what is left of the budget.
# Run from the repository root with PYTHONPATH=src; W is the output folder, COMMIT the code's commit.
set -u
W=${W:-$OUT/s3b}; mkdir -p "$W"
source "$(dirname "$0")/stages.sh"
P=${P:-fixtures/profiles/gpu-ref-large.toml}
BUDGET=${BUDGET:-480}
COMMIT=${COMMIT:-unknown}
drift() {  # gpu, budget seconds, seed
  python3 docs/validation/drift_experiment.py --profiles $P --profile large-eagle3-tuned --gpu "$1" \
    --baseline-boots 0 --reps 40 --levels 0,6,8 --budget-s "$2" --seed "$3" --out "$W/drift-large-gpu$1-b.json" \
    > "$W/drift-large-gpu$1-b.log" 2>&1
}
drift 1 "$BUDGET" 5 &
t0=$SECONDS
export CUDA_VISIBLE_DEVICES=0
variant $P "$W/slow8.toml" 'extra_args = ["--ref-fault-slowdown", "8"]'
k=(-m perf tests/perf/test_throughput.py -k "drift and large-eagle3-tuned" --specwatch-machine-class h200x1
   --specwatch-commit "$COMMIT")
run large-record 150 "${k[@]}" --specwatch-profiles $P --update-baselines --specwatch-baseline-sessions 40 \
    --specwatch-report-dir "$W/record" "${common[@]}" --specwatch-baseline-dir "$W/scratch"
S3=docs/validation/data/session3
python3 docs/validation/drift_analysis.py $S3/drift-large-gpu0.json $S3/drift-large-gpu1.json \
    --write-results "$W/call1" --machine-from "$W/record/results-latest.json" --commit "${CALL1_COMMIT:-$COMMIT}" \
    > "$W/call1-analysis.txt" 2>&1
python3 - "$W/call1" > "$W/call1-order.txt" <<'PY'
import json, sys, pathlib
files = sorted(pathlib.Path(sys.argv[1]).glob("boot*.json"), key=lambda p: json.loads(p.read_text())["created"])
print("\n".join(map(str, files)))
PY
for f in $(cat "$W/call1-order.txt") "$W/record/results-latest.json"; do
  python3 -m specwatch.cli baseline update "$f" --baseline-dir "$W/baselines" --keep-sessions 40 --machine-class h200x1 \
      >> "$W/baseline-update.txt" 2>&1
done
for i in 1 2; do
  run large-slow8-$i 120 "${k[@]}" --specwatch-profiles "$W/slow8.toml" --specwatch-report-dir "$W/slow8-$i" "${common[@]}"
  run large-healthy-$i 120 "${k[@]}" --specwatch-profiles $P --specwatch-report-dir "$W/healthy-$i" "${common[@]}"
done
unset CUDA_VISIBLE_DEVICES
left=$((BUDGET - (SECONDS - t0)))
[ "$left" -gt 60 ] && drift 0 "$left" 6
wait
