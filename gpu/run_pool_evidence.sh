#!/usr/bin/env bash
# The buffer-pool evidence on the lent GPU (see gpu/results/buffer_pool.md). One process per job, so
# a kernel fault in one (upstream reading past a short buffer) cannot poison the next.
# Runs from a folder holding sglang_aiter_plugin/, tests/{backend,doubles}/, gpu/ and, optionally,
# sglang-0.5.15.tar.xz; sglang 0.5.23 must already be importable. Logs go to $OUT.
# ONLY=REGEX runs the jobs whose label matches.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
G=gpu.buffer_pool_graphs
MC=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 POOL_GPU_MAX_LEN=64 compute-sanitizer --tool memcheck --print-limit 20)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
compute-sanitizer --version | tail -1
if [[ -f sglang-0.5.15.tar.xz ]]; then mkdir -p /tmp/sg15 && tar xJf sglang-0.5.15.tar.xz -C /tmp/sg15; fi
job() {  # label timeout command...
  local label=$1 limit=$2; shift 2
  [[ $label =~ ${ONLY:-.} ]] || return 0
  timeout "$limit" "$@" > "$OUT/$label.log" 2>&1
  echo "$label rc=$?"
}
for k in aiter-ext upstream; do
  # 1. graphs at every captured batch size (ragged and unified decode), 2. an extend batch
  job "graphs-0.5.23-$k" 100 python3 -m $G --parts graphs --kinds $k
  job "extend-0.5.23-$k" 60 python3 -m $G --parts extend --kinds $k
  # 3. memcheck, every tensor its own allocation
  job "memcheck-ragged-0.5.23-$k" 100 "${MC[@]}" python3 -m $G --parts eager,extend --paths ragged --kinds $k
  job "memcheck-unified-0.5.23-$k" 100 "${MC[@]}" python3 -m $G --parts eager --paths unified --kinds $k
  job "memcheck-block16-0.5.23-$k" 60 "${MC[@]}" python3 -m $G --parts block16 --kinds $k
  if [[ -d /tmp/sg15 ]]; then
    job "extend-graphs-0.5.15-$k" 60 env PYTHONPATH=/tmp/sg15:${PYTHONPATH:-} python3 -m $G --parts extend,graphs --kinds $k
  fi
done
# 4. one metadata call above the captured maximum (ragged, unified, draft), without and with
#    SGLANG_AITER_EXT_BOUNDS_CHECK, under memcheck
for c in 0 1; do
  job "memcheck-above-0.5.23-aiter-ext-check$c" 100 env SGLANG_AITER_EXT_BOUNDS_CHECK=$c "${MC[@]}" python3 -m $G --parts above --paths ragged,unified,draft --kinds aiter-ext
done
