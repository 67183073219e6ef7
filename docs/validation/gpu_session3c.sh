#!/usr/bin/env bash
# Session 3, call 3 (nvidia-h200-x2): issue 5's check through pytest with a baseline recorded on this
# machine, then tuned against untuned on sockets at TP=2.
#  1. Each GPU records 4 sessions of large-eagle3-tuned through pytest (--update-baselines), at once;
#  2. the 8 sessions are merged, oldest first, into one h200x1 baseline (the machine class's);
#  3. each GPU then runs 8 % slowdown / healthy rerun pairs against that baseline, at once;
#  4. tuned against untuned, ref-large TP=2 over sockets, runs interleaved (gpu-ref-large-tp2-socket).
# Run from the repository root with PYTHONPATH=src; W is the output folder, COMMIT the code's commit.
set -u
W=${W:-$OUT/s3c}; mkdir -p "$W"
source "$(dirname "$0")/stages.sh"
P=${P:-fixtures/profiles/gpu-ref-large.toml}
PS=${PS:-fixtures/profiles/gpu-ref-large-tp2-socket.toml}
RECORDS=${RECORDS:-4}; PAIRS=${PAIRS:-3}; LIMIT=${LIMIT:-540}
t0=$SECONDS
variant $P "$W/slow8.toml" 'extra_args = ["--ref-fault-slowdown", "8"]'
k=(-m perf tests/perf/test_throughput.py -k "drift and large-eagle3-tuned" --specwatch-machine-class h200x1
   --specwatch-commit "${COMMIT:-unknown}")
record() {  # gpu
  for i in $(seq "$RECORDS"); do
    CUDA_VISIBLE_DEVICES=$1 run g$1-record-$i 120 "${k[@]}" --specwatch-profiles $P --update-baselines \
      --specwatch-report-dir "$W/g$1-record-$i" "${common[@]}" --specwatch-baseline-dir "$W/scratch-g$1" \
      --specwatch-history "$W/history-g$1.sqlite"
  done
}
pairs() {  # gpu
  for i in $(seq "$PAIRS"); do
    CUDA_VISIBLE_DEVICES=$1 run g$1-slow8-$i 120 "${k[@]}" --specwatch-profiles "$W/slow8.toml" \
      --specwatch-report-dir "$W/g$1-slow8-$i" "${common[@]}" --specwatch-history "$W/history-g$1.sqlite"
    CUDA_VISIBLE_DEVICES=$1 run g$1-healthy-$i 120 "${k[@]}" --specwatch-profiles $P \
      --specwatch-report-dir "$W/g$1-healthy-$i" "${common[@]}" --specwatch-history "$W/history-g$1.sqlite"
  done
}
record 0 & record 1 & wait
python3 - "$W" > "$W/record-order.txt" <<'PY'
import json, sys, pathlib
files = sorted(pathlib.Path(sys.argv[1]).glob("g*-record-*/results-latest.json"),
               key=lambda p: json.loads(p.read_text())["created"])
print("\n".join(map(str, files)))
PY
for f in $(cat "$W/record-order.txt"); do
  python3 -m specwatch.cli baseline update "$f" --baseline-dir "$W/baselines" --keep-sessions 20 \
      --machine-class h200x1 >> "$W/baseline-update.txt" 2>&1
done
echo "records merged at $((SECONDS - t0)) s" >> "$W/stages.txt"
pairs 0 & pairs 1 & wait
left=$((LIMIT - (SECONDS - t0)))
echo "pairs done at $((SECONDS - t0)) s; $left s left for the socket stage" >> "$W/stages.txt"
[ "$left" -gt 60 ] && run tp2-socket-interleave "$left" -m perf tests/perf/test_gates.py -k tuned \
    --specwatch-profiles $PS --specwatch-machine-class h200x2-socket --specwatch-report-dir "$W/socket" "${common[@]}"
true
