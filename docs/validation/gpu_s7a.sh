#!/usr/bin/env bash
# Session 7, call A (issue 15): `specwatch ab` on ref-large EAGLE3, one H200 per loop, both loops at once
# on the two GPUs of an nvidia-h200-x2 host (each loop its own GPU, so no loop disturbs the other's GPU):
#   GPU 0: a ~2% slowdown from outside the server (GPU sleep after every CUDA graph replay) against healthy;
#   GPU 1: healthy against healthy (A/A).
# Each verdict: --rounds 2 --max-rounds 4 --tolerance 0.005, the round spread pooled with the h200x1
# file in baselines/ (copied: the runs add to the copy, which comes back in $OUT). Verdicts repeat until
# the deadline. Run from the repository root: DEADLINE=520 bash docs/validation/gpu_s7a.sh
source docs/validation/gpu_s7_setup.sh s7a
CYCLES=${CYCLES:-180000}
mkdir -p "$W/rh"; cp -r baselines/h200x1 "$W/rh/"
BASE=${BASE:-docs/validation/ab/large-base.toml}
sed "s/SPECWATCH_SLOWDOWN_GPU_CYCLES = \"120000\"/SPECWATCH_SLOWDOWN_GPU_CYCLES = \"$CYCLES\"/" \
    ${SLOW_SRC:-docs/validation/ab/large-slow.toml} > docs/validation/ab/large-slow-s7.toml
args=(-m perf tests/perf/test_throughput.py -k "drift and decode" -p no:cacheprovider -q
      --specwatch-baseline-dir=/tmp/none --specwatch-yardstick=off)
loop() {  # gpu name head-profile
  local gpu=$1 name=$2 head=$3 i=0
  while (( $(left) > ${VERDICT_S:-150} )); do
    i=$((i + 1))
    local t=$SECONDS
    CUDA_VISIBLE_DEVICES=$gpu timeout -k 10 $(( $(left) - 5 )) python3 -m specwatch.cli ab \
      --base-profile "$BASE" --head-profile "$head" \
      --rounds 2 --max-rounds 4 --tolerance 0.005 --metric decode_tok_s \
      --round-history "$W/rh" --record-rounds --memo "/tmp/abmemo-$gpu" -- "${args[@]}" \
      --specwatch-report-dir="/tmp/reports-$gpu" \
      > "$W/ab-$name-$i.txt" 2>&1
    note "ab $name $i (GPU $gpu): exit $? in $(( SECONDS - t )) s; $(grep -E '^\[ab\] (REGRESSION|UNSURE|no regression)' "$W/ab-$name-$i.txt" | head -1)"
  done
}
# the yardstick on each GPU before any server (issue 15 item 2), when this checkout has it
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g timeout 60 python3 -m specwatch.load.yardstick --json > "$W/yardstick-gpu$g-start.json" 2>&1 || true
done
loop 0 slow docs/validation/ab/large-slow-s7.toml &
loop 1 same "$BASE" &
wait
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g timeout 60 python3 -m specwatch.load.yardstick --json > "$W/yardstick-gpu$g-end.json" 2>&1 || true
done
cp -r /tmp/abmemo-0 /tmp/abmemo-1 "$W/" 2>/dev/null
note "done"
