# Helpers shared by the GPU validation scripts (sourced; W is the work folder).
# PYTHON defaults to python3 (session 1's gpu_validate.sh ran `python`, the same interpreter there).
common=(-p no:cacheprovider -rA --specwatch-baseline-dir "$W/baselines" --specwatch-history "$W/history.sqlite")
run() {  # name, timeout, pytest args...: one stage, its output in $W/<name>.txt, a line in stages.txt
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "${PYTHON:-python3}" -m pytest "$@" > "$W/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$W/stages.txt"
  grep -E "passed|failed" "$W/$name.txt" | tail -1 | tee -a "$W/stages.txt"
}
variant() {  # base profile, output, extra TOML line for [defaults]
  awk -v extra="$3" '{print} /^\[defaults\]/{print extra}' "$1" > "$2"
}
