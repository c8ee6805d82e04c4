#!/usr/bin/env bash
# One call on a GPU machine: the examples and each attack with --device cuda, results in benchmarks/results/gpu.json.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        (default OUT_DIR: /tmp/auditor-gpu-check)
#
# Never run in CI (it refuses when $CI is set, unless GPU_CHECK_FORCE=1): it needs a CUDA device and
# minutes of GPU time. Every step has its own timeout (STEP_TIMEOUT_S, default 300; ATTACK_TIMEOUT_S,
# default 600) and a failing or timed-out step is recorded, never fatal: the script always ends by
# writing gpu.json with one row per step (command, exit code, wall seconds, timed out, the tail of its
# stderr) and, for every scan, each plugin's status, headline numbers and device from its JSON report.
# PYTHON (default: python) is the interpreter with auditor installed.
set -u
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp/auditor-gpu-check}"
PY="${PYTHON:-python}"
STEP_TIMEOUT_S="${STEP_TIMEOUT_S:-300}"
ATTACK_TIMEOUT_S="${ATTACK_TIMEOUT_S:-600}"
STEPS="$OUT/steps.jsonl"
STARTED="$(date -u +%Y-%m-%dT%H:%M:%S+00:00)"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo)"

if [ -n "${CI:-}" ] && [ "${GPU_CHECK_FORCE:-0}" != "1" ]; then
  echo "gpu_check.sh: not run in CI (set GPU_CHECK_FORCE=1 to override)" >&2
  exit 0
fi
mkdir -p "$OUT"
: > "$STEPS"
cd "$ROOT" || exit 1
export PYTHONPATH="$ROOT:$ROOT/plugins:${PYTHONPATH:-}"
export AUDITOR_NO_CACHE=1  # every step computes: a GPU check must not read CPU results from a cache

# step NAME TIMEOUT [REPORT_JSON] -- CMD...: run CMD under timeout, append one JSON line to $STEPS.
step() {
  local name="$1" limit="$2" report="$3"
  shift 4
  local err="$OUT/$name.stderr" start end code
  echo "== $name: $*" >&2
  start=$(date +%s.%N)
  timeout --kill-after=30 "$limit" "$@" > "$OUT/$name.stdout" 2> "$err"
  code=$?
  end=$(date +%s.%N)
  "$PY" - "$name" "$code" "$start" "$end" "$limit" "$err" "$report" "$STEPS" "$@" <<'EOF'
import json, sys
name, code, start, end, limit, err, report, steps, *cmd = sys.argv[1:]
row = {"step": name, "command": cmd, "exit": int(code), "wall_s": round(float(end) - float(start), 2),
       "timeout_s": float(limit), "timed_out": int(code) in (124, 137)}
try:
    row["stderr_tail"] = open(err, encoding="utf-8", errors="replace").read()[-1500:]
except OSError:
    row["stderr_tail"] = ""
if report:
    try:
        data = json.load(open(report, encoding="utf-8"))
        row["verdict"] = data["summary"]["verdict"]
        row["device"] = data["tool"]["device"]
        row["plugins"] = [{"name": p["name"], "status": p["status"], "category": p.get("category"),
                           "duration_s": p.get("duration_s"), "device": p.get("provenance", {}).get("device"),
                           "headline": {h["name"]: {"value": h["value"], "floor": h.get("floor"), "ci": h.get("ci")}
                                        for h in p.get("headline", [])}}
                          for p in data["plugins"] if p["status"] != "skipped" or p.get("category") != "not-selected"]
    except (OSError, ValueError, KeyError) as exc:
        row["report_error"] = f"{type(exc).__name__}: {exc}"
with open(steps, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(row) + "\n")
print(f"   exit {code}, {row['wall_s']} s" + (" (TIMED OUT)" if row["timed_out"] else ""), file=sys.stderr)
EOF
}

step environment 120 "" -- "$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
step nvidia-smi 60 "" -- nvidia-smi

# The examples (resnet18 in every format, a ViT, RepVGG forms), each scanned statically on the GPU.
step build-examples "$STEP_TIMEOUT_S" "" -- "$PY" examples/build_checkpoints.py --out "$OUT/examples"
for f in "$OUT"/examples/*.pt "$OUT"/examples/*.safetensors "$OUT"/examples/*.ts "$OUT"/examples/*.pt2; do
  [ -e "$f" ] || continue
  b="$(basename "$f")"
  step "example-${b//./_}" "$STEP_TIMEOUT_S" "$OUT/example-$b.json" -- \
    "$PY" -m auditor scan "$f" --device cuda --json "$OUT/example-$b.json" --quiet
done

# Each attack on the digits residual CNN of benchmarks/full_audit.py (3x32x32, manifest data), on the GPU.
step build-digits "$STEP_TIMEOUT_S" "" -- "$PY" -c "import sys; from pathlib import Path; sys.path.insert(0, 'benchmarks'); sys.path.insert(0, 'examples'); from benchmarks.full_audit import build; build(Path('$OUT/digits-target'))"
for plugin in gradient-inversion split-inversion membership-inference model-inversion attribute-inference; do
  step "attack-$plugin" "$ATTACK_TIMEOUT_S" "$OUT/attack-$plugin.json" -- \
    "$PY" -m auditor scan "$OUT/digits-target/model.pt" --plugins "$plugin" --data "$OUT/digits-target/digits" \
      --input-shape 3,32,32 --device cuda --seed 0 --json "$OUT/attack-$plugin.json" --quiet
done

# Collect the rows into benchmarks/results/gpu.json (with the run's facts: commit, torch, load average).
"$PY" - "$STEPS" "$STARTED" "$LOAD_START" <<'EOF'
import json, sys
sys.path.insert(0, ".")
from benchmarks import results
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
run = {**results.begin(), "command": "bash benchmarks/gpu_check.sh", "started": sys.argv[2],
       "load_start": [float(v) for v in sys.argv[3].split()]}
failed = [r["step"] for r in rows if r["exit"] not in (0, 1, 3)]  # 1: findings, 3: inconclusive; both ran
path = results.write("gpu", run, {"steps": rows, "failed": failed})
print(f"results: {path}; {len(rows)} steps, failed: {failed}")
EOF
