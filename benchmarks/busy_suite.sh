#!/usr/bin/env bash
# How "make test passes under two busy background loops" is checked: start two CPU-bound loops (one per core of
# the 2-core box), run make test's two steps (ruff, then pytest -n 2) beside them, stop the loops, and write
# benchmarks/results/busy_suite.json: the wall seconds, pytest's exit code and summary line, and the CPU seconds
# the tests used (summed from tests/conftest.py's AUDITOR_TEST_CPU_LOG, which does not depend on the load).
# Usage: benchmarks/busy_suite.sh [VENV]   (default .venv; nothing else may run on the box meanwhile)
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-.venv}/bin"
LOG="$(mktemp)"
OUT="$(mktemp)"
loops=()
for _ in 1 2; do
  "$BIN/python" -c "while True: pass" &
  loops+=("$!")
done
start=$(date +%s)
"$BIN/python" -m ruff check . && AUDITOR_TEST_CPU_LOG="$LOG" "$BIN/python" -m pytest -q -n 2 -p no:cacheprovider >"$OUT" 2>&1
code=$?
end=$(date +%s)
kill "${loops[@]}"
"$BIN/python" - "$LOG" "$OUT" "$code" "$((end - start))" <<'PY'
import json, sys
log, out, code, wall = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(line) for line in open(log, encoding="utf-8")]
summary = [line for line in open(out, encoding="utf-8").read().splitlines() if " in " in line and "passed" in line]
result = {"what": "make test (ruff, pytest -n 2) beside two busy loops on the 2-core box",
          "wall_s": wall, "exit_code": code, "summary": summary[-1] if summary else None,
          "tests": len(rows), "test_cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
          "heaviest": sorted(rows, key=lambda r: -r["cpu_s"])[:15]}
json.dump(result, open("benchmarks/results/busy_suite.json", "w"), indent=2)
print(json.dumps({k: v for k, v in result.items() if k != "heaviest"}))
PY
exit "$code"
