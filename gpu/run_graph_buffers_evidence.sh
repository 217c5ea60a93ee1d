#!/usr/bin/env bash
# Width and content of the decode graph buffers on the lent GPU (see gpu/results/graph_buffers.md).
#
#   SG12=/tmp/sg12 SG23=/tmp/sg23 bash gpu/run_graph_buffers_evidence.sh AITER_TREE
#
# SG12 / SG23: folders where sglang 0.5.12 / 0.5.23 (and what they import) are installed; put
# first on PYTHONPATH per job. AITER_TREE: a folder holding aiter/ and an AITER_ORIGIN line.
# Runs from a folder holding sglang_aiter_plugin/, testkit/ and gpu/. One process per job (a
# kernel fault in one cannot poison the next); logs go to $OUT/logs, one line per job to stdout.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
G=gpu.graph_buffers
LOGS=${OUT:-/tmp}/logs
mkdir -p "$LOGS"
MC=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --print-limit 10)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
compute-sanitizer --version | tail -1
date -u '+%Y-%m-%d %H:%M:%S UTC'
job() {  # label release-dir timeout command...
  local label=$1 site=$2 limit=$3; shift 3
  [[ $label =~ ${ONLY:-.} ]] || return 0
  local start; start=$(date +%s)
  PYTHONPATH=$site:$here timeout "$limit" "$@" > "$LOGS/$label.log" 2>&1
  local rc=$?
  local errors; errors=$(grep -hom1 'ERROR SUMMARY: [0-9,]* errors\?$' "$LOGS/$label.log")
  echo "$label rc=$rc ${errors:-no memcheck summary} ($(( $(date +%s) - start )) s)"
}
for k in upstream aiter-ext; do
  # page 16, ragged decode at near-full context, sglang 0.5.12, under memcheck: the capture-time
  # and replay-time metadata calls (sglang's kv-indices kernel), then the forward, without a
  # graph (PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes every allocation inside a capture invalid)
  job "width-memcheck-0.5.12-$k" "${SG12:-/tmp/sg12}" 240 "${MC[@]}" python3 -m $G --parts width --kinds $k --no-graphs
  job "unified-memcheck-0.5.23-$k" "${SG23:-/tmp/sg23}" 240 "${MC[@]}" python3 -m $G --parts unified --kinds $k --no-graphs --aiter-tree "$1"
  # the same without memcheck: the numbers (rows right, entries written)
  job "width-0.5.12-$k" "${SG12:-/tmp/sg12}" 120 python3 -m $G --parts width --kinds $k
  # page 1, unified decode graph with aiter's real unified_attention, 0.5.23 and 0.5.12
  job "unified-0.5.23-$k" "${SG23:-/tmp/sg23}" 240 python3 -m $G --parts unified --kinds $k --aiter-tree "$1"
  job "unified-0.5.12-$k" "${SG12:-/tmp/sg12}" 240 python3 -m $G --parts unified --kinds $k --aiter-tree "$1"
done
