#!/usr/bin/env bash
# How "make test passes under two busy background loops" is checked: start LOOPS CPU-bound loops (default 2, one
# per core of the 2-core box), run make test's two steps (ruff, then pytest -n 2) beside them, stop the loops, and
# store the run in benchmarks/results/busy_suite.json (key "busy", or "idle" with LOOPS=0): the wall seconds,
# pytest's exit code and summary line, the load average before the loops started and at the end, and the CPU
# seconds the tests used (summed from tests/conftest.py's AUDITOR_TEST_CPU_LOG, which does not depend on the load).
# benchmarks/render_docs.py quotes it in docs/contributing.md.
# Usage: benchmarks/busy_suite.sh [LOOPS] [VENV]   (default 2 and .venv; the load before the loops says what else ran)
set -uo pipefail
cd "$(dirname "$0")/.."
LOOPS="${1:-2}"
BIN="${2:-.venv}/bin"
LOG="$(mktemp)"
OUT="$(mktemp)"
loops=()
trap 'kill "${loops[@]}" 2>/dev/null; rm -f "$LOG" "$OUT"' EXIT
before="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < LOOPS; i++)); do
  "$BIN/python" -c "while True: pass" &
  loops+=("$!")
done
start=$(date +%s)
"$BIN/python" -m ruff check . && AUDITOR_TEST_CPU_LOG="$LOG" "$BIN/python" -m pytest -q -n 2 -p no:cacheprovider >"$OUT" 2>&1
code=$?
end=$(date +%s)
at_end="$(cut -d' ' -f1-3 /proc/loadavg)"
kill "${loops[@]}" 2>/dev/null
loops=()
tail -n 3 "$OUT"
PYTHONPATH=. "$BIN/python" - "$LOG" "$OUT" "$code" "$((end - start))" "$LOOPS" "$before" "$at_end" "$start" <<'PY'
import argparse, datetime, json, sys
from benchmarks import results
log, out, code, wall, loops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
before, at_end = ([float(v) for v in s.split()] for s in sys.argv[6:8])
rows = [json.loads(line) for line in open(log, encoding="utf-8")]
summary = [line for line in open(out, encoding="utf-8").read().splitlines() if " in " in line and "passed" in line]
started = datetime.datetime.fromtimestamp(int(sys.argv[8]), datetime.timezone.utc).isoformat(timespec="seconds")
run = {**results.begin(), "command": f"benchmarks/busy_suite.sh {loops}", "started": started, "load_start": before}
got = {"what": f"make test (ruff, pytest -n 2) beside {loops} busy loop(s) on the {run['cpu_count']}-CPU box",
       "loops": loops, "wall_s": wall, "exit_code": code, "summary": summary[-1] if summary else None,
       "load_before_loops": before, "load_at_end": at_end, "tests": len(rows),
       "test_cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
       "heaviest": sorted(rows, key=lambda r: -r["cpu_s"])[:15]}
key = argparse.Namespace(results_key="busy" if loops else "idle", no_results=False, results_note="")
results.write("busy_suite", run, got, key)
PY
exit "$code"
