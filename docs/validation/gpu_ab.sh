#!/usr/bin/env bash
# specwatch ab on one H200 with ref-large EAGLE3 (validation section 10): a ~2% slowdown injected from
# outside the server (fixtures/faults/slowdown: torch.cuda._sleep after every CUDA graph replay) and the
# healthy server against itself (A/A). Run from the repository root on the device machine:
#   bash docs/validation/gpu_ab.sh OUT_DIR [REPEATS]
set -uo pipefail
out=${1:?usage: gpu_ab.sh OUT_DIR [REPEATS]}; repeats=${2:-1}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpu.txt"
args=(-m perf tests/perf/test_throughput.py -k "drift and decode" -p no:cacheprovider -q
      --specwatch-history=/tmp/h.sqlite --specwatch-report-dir=/tmp/reports --specwatch-baseline-dir=/tmp/none)
for i in $(seq 1 "$repeats"); do
  for pair in slow:large-slow.toml same:large-base.toml; do
    name=${pair%%:*}; head=${pair#*:}
    start=$(date +%s)
    python3 -m specwatch.cli ab --base-profile docs/validation/ab/large-base.toml \
        --head-profile docs/validation/ab/$head --rounds 3 --max-rounds 4 --metric decode_tok_s \
        --tolerance 0.01 --memo /tmp/abmemo -- "${args[@]}" > "$out/ab-$name-$i.txt" 2>&1
    echo "ab $name repeat $i: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    grep -E "^\[ab\] (large|REGRESSION|UNSURE|no regression)" "$out/ab-$name-$i.txt" | tee -a "$out/summary.txt"
  done
done
