#!/usr/bin/env bash
# One device-tool call, several phases: bash benchmarks/device_run.sh "tests bench" [extra gpu.py args]
# Phases: tests (tests/cuda + the GPU op tests), bench (benchmarks/gpu.py), probe (probes/modes_probe.py),
# lmhead (probes/lm_head_probe.py), cold:<args> (benchmarks/cold_compile.py <args>), pytest:<args> (output in
# $OUT/pytest_<n>.txt), py:<script args> (python3 <script args>; output in $OUT/py_<n>.txt), fuzz:<args> (python3 -m tests.fuzz <args>;
# reproducers in $OUT/fuzz_<n>.tgz); in <args> '%' stands for a space. Each phase's output goes to a file in $OUT.
# Run from the repository root on the lent GPU machine, with .whl carried (bytecode wheel); results in $OUT.
set -u
phases="${1:-tests bench}"; shift || true
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
git log --oneline -1 2>/dev/null
for phase in $phases; do
  start=$(date +%s)
  case "$phase" in
    tests)   # 8 pytest-xdist workers (the host's image has it): the whole GPU suite in about a minute
             timeout "${TESTS_S:-240}" python3 -m pytest tests/cuda tests/compiler -q -m gpu -n 8 -p no:cacheprovider \
               > "$OUT/cuda_tests.txt" 2>&1; tail -25 "$OUT/cuda_tests.txt" ;;
    bench)   timeout "${BENCH_S:-330}" python3 benchmarks/gpu.py --out "$OUT" "$@" > "$OUT/bench.txt" 2>&1; tail -60 "$OUT/bench.txt" ;;
    cold:*)  cargs="${phase#cold:}"
             timeout "${COLD_S:-300}" python3 benchmarks/cold_compile.py --out "$OUT" ${cargs//%/ } \
               > "$OUT/cold.txt" 2>&1; tail -30 "$OUT/cold.txt" ;;
    py:*)    pargs="${phase#py:}"; n=$(ls "$OUT"/py_*.txt 2>/dev/null | wc -l)
             timeout "${PY_S:-240}" python3 ${pargs//%/ } > "$OUT/py_$n.txt" 2>&1; tail -40 "$OUT/py_$n.txt" ;;
    fuzz:*)  fargs="${phase#fuzz:}"; n=$(ls -d "$OUT"/fuzz_*.tgz 2>/dev/null | wc -l)
             # reproducers travel as one archive ($OUT allows few files)
             timeout "${FUZZ_S:-300}" python3 -m tests.fuzz ${fargs//%/ } --out "/tmp/fuzz_$n" > "$OUT/fuzz_$n.txt" 2>&1
             tar czf "$OUT/fuzz_$n.tgz" -C /tmp "fuzz_$n" 2>/dev/null; tail -15 "$OUT/fuzz_$n.txt" ;;
    probe)   timeout "${PROBE_S:-120}" python3 benchmarks/probes/modes_probe.py 2>&1 | tail -40 ;;
    lmhead)  timeout "${PROBE_S:-120}" python3 benchmarks/probes/lm_head_probe.py > "$OUT/lmhead.txt" 2>&1; tail -40 "$OUT/lmhead.txt" ;;
    pytest:*) args="${phase#pytest:}"       # '%' stands for a space: "pytest:-m%gpu%tests/compiler"
              n=$(ls "$OUT"/pytest_*.txt 2>/dev/null | wc -l)
              timeout "${TESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider ${args//%/ } \
                > "$OUT/pytest_$n.txt" 2>&1; tail -25 "$OUT/pytest_$n.txt" ;;
    *)       echo "unknown phase $phase" ;;
  esac
  echo "[device_run] $phase took $(( $(date +%s) - start )) s"
done
