#!/usr/bin/env bash
# Session 3, call 1 (nvidia-h200-x2): the GPU-bound reference model, ref-large.
#  - GPU 1 at once: the drift repetition experiment on large-eagle3-tuned (3 baseline boots, then
#    repetitions of 0 / 4 / 8 % slowdown in shuffled order, one boot each);
#  - GPU 0: the step-level benchmark of ref-large first (step times, accept lengths, graph use), then
#    the same drift experiment.
# Run from the repository root with PYTHONPATH=src; W is the output folder.
set -u
W=${W:-$OUT/s3a}; mkdir -p "$W"
P=fixtures/profiles/gpu-ref-large.toml
BUDGET=${BUDGET:-430}
drift() {  # gpu, budget seconds
  python3 docs/validation/drift_experiment.py --profiles $P --profile large-eagle3-tuned --gpu "$1" \
    --baseline-boots 3 --reps 40 --levels 0,4,8 --budget-s "$2" --seed 3 --out "$W/drift-large-gpu$1.json" \
    > "$W/drift-large-gpu$1.log" 2>&1
}
drift 1 "$BUDGET" &
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 benchmarks/refserver_steps.py --preset ref-large --num-steps 2 \
  --max-new 128 --iters 20 --extra-presets ref-large-perfect,ref-large-poor --out "$W/steps-large.json" \
  > "$W/steps-large.log" 2>&1
echo "steps benchmark: exit $? in $((SECONDS - t0)) s" >> "$W/stages.txt"
drift 0 $((BUDGET - (SECONDS - t0)))
wait
nvidia-smi --query-gpu=index,memory.used --format=csv >> "$W/stages.txt"
