# Session 7 (2026-12-01): shared setup of the device calls, sourced from the repository root.
# Installs the carried setproctitle wheel, puts src/ on PYTHONPATH, records the GPUs, and sets W
# (the work folder /tmp/sw/<name>, packed into $OUT/<name>.tgz on exit: $OUT returns at most 8 files)
# and T0 (the call's start, for deadlines).
set -u
T0=$SECONDS
NAME=${1:?usage: source gpu_s7_setup.sh NAME}
W=/tmp/sw/$NAME
mkdir -p "$W" "${OUT:=/tmp/out}"
trap 'tar czf "$OUT/$NAME.tgz" -C /tmp/sw "$NAME"; cat "$W/steps.txt" 2>/dev/null' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/gpu.txt" 2>&1
nvidia-smi topo -m >> "$W/gpu.txt" 2>&1
left() { echo $(( ${DEADLINE:-540} - (SECONDS - T0) )); }  # seconds left before this call's deadline
note() { echo "[$(( SECONDS - T0 ))s] $*" | tee -a "$W/steps.txt"; }
step() {  # name timeout cmd...: one step, output in $W/<name>.txt, exit and seconds in steps.txt
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  timeout -k 10 "$limit" "$@" > "$W/$name.txt" 2>&1
  local rc=$?
  note "$name: exit $rc in $(( SECONDS - t )) s"
  return $rc
}
