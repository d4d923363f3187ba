#!/usr/bin/env bash
# Warm starts of two versions of graphjit on one host, interleaved (the host's speed drifts between calls):
#   git archive HEAD graphjit tests benchmarks -o .gpu_head.tar; git archive <old> graphjit benchmarks -o .gpu_old.tar
#   (device tool, .whl carried) bash benchmarks/warm_start_ab.sh [rounds] [workloads]
# Each round runs benchmarks/warm_start.py (a cold then a warm process per workload) for head, then old.
set -u
rounds=${1:-2}; only=${2:-gpt2_prefill,resnet50,llama}
mkdir -p /tmp/head /tmp/old
tar xf .gpu_head.tar -C /tmp/head && tar xf .gpu_old.tar -C /tmp/old
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
for round in $(seq "$rounds"); do
  for v in head old; do
    (cd /tmp/$v && PYTHONPATH=/tmp/site:/tmp/$v timeout 200 python3 benchmarks/warm_start.py --device cuda \
       --only "$only" --contenders graphjit 2>&1 | grep "^| [A-Z]" | sed "s/^/$v $round /")
  done
done
