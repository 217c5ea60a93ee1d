#!/usr/bin/env bash
# aiter's real Triton unified_attention on the lent GPU (see gpu/results/unified_attention_real.md).
#
#   bash gpu/run_unified_evidence.sh TREE [TREE...]
#
# Each TREE is a folder holding a copy of aiter's aiter/ops/triton (the modules unified_attention
# imports) and an AITER_ORIGIN line naming the tree and commit. Runs from a folder holding
# sglang_aiter_plugin/, tests/{backend,doubles}/ and gpu/; sglang 0.5.23 must already be
# importable. One process per job (a kernel fault in one cannot poison the next), JOBS at a time;
# logs go to $LOGS (default $OUT/logs), one line per job to stdout and $LOGS/summary.txt.
# ONLY=REGEX runs the jobs whose label matches.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
U=gpu.unified_attention_real
LOGS=${LOGS:-${OUT:-/tmp}/logs}
JOBS=${JOBS:-8}
mkdir -p "$LOGS"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache-unified}
MC=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 POOL_GPU_MAX_LEN=64 compute-sanitizer --tool memcheck --print-limit 20)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
compute-sanitizer --version | tail -1
date -u '+%Y-%m-%d %H:%M:%S UTC'

job() {  # label timeout command...
  local label=$1 limit=$2; shift 2
  [[ $label =~ ${ONLY:-.} ]] || return 0
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  (
    start=$(date +%s)
    timeout "$limit" "$@" > "$LOGS/$label.log" 2>&1
    rc=$?
    errors=$(grep -hom1 'ERROR SUMMARY: [0-9,]* errors\?$' "$LOGS/$label.log")
    echo "$label rc=$rc ${errors:-no memcheck summary} ($(( $(date +%s) - start )) s)" \
      | tee -a "$LOGS/summary.txt"
  ) &
}

for tree in "$@"; do
  t=$(basename "$tree")
  # the kernel alone: cu_seqlens_q of seqs + 1 entries (control), then seqs (one short)
  for shape in decode-2d decode-3d extend; do
    job "contract-$shape-$t" 150 "${MC[@]}" python3 -m $U --aiter-tree "$tree" --parts contract --contract $shape
  done
  for k in aiter-ext upstream; do
    # graphs at every captured size; then extend and verify (graphs), numerics against torch
    job "graphs-$t-$k" 200 python3 -m $U --aiter-tree "$tree" --parts graphs --kinds $k
    job "extend-verify-$t-$k" 200 python3 -m $U --aiter-tree "$tree" --parts extend,verify --kinds $k
    # memcheck, every tensor its own allocation
    for part in eager extend verify-eager; do
      job "memcheck-$part-$t-$k" 220 "${MC[@]}" python3 -m $U --aiter-tree "$tree" --parts $part --kinds $k
    done
  done
done
wait
sort "$LOGS/summary.txt"
