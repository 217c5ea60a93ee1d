#!/usr/bin/env bash
# MLA decode graphs through aiter's own mla.py on the lent GPU (see gpu/results/mla_split_table.md).
#
#   bash gpu/run_mla_evidence.sh TREE
#
# TREE holds a copy of aiter's aiter/mla.py and an AITER_ORIGIN line naming the tree and commit.
# Runs from a folder holding sglang_aiter_plugin/, testkit/ and gpu/; sglang 0.5.23 must already be
# importable. One process per job (a fault in one cannot poison the next); logs go to $LOGS
# (default $OUT/logs), one line per job to stdout and $LOGS/summary.txt. ONLY=REGEX runs the jobs
# whose label matches.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
tree=$1
M=gpu.mla_split_table
LOGS=${LOGS:-${OUT:-/tmp}/logs}
mkdir -p "$LOGS"
MC=(compute-sanitizer --tool memcheck --print-limit 20)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
compute-sanitizer --version | tail -1
date -u '+%Y-%m-%d %H:%M:%S UTC'
job() {  # label timeout command...
  local label=$1 limit=$2; shift 2
  [[ $label =~ ${ONLY:-.} ]] || return 0
  start=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$label.log" 2>&1
  rc=$?
  errors=$(grep -hom1 'ERROR SUMMARY: [0-9,]* errors\?$' "$LOGS/$label.log")
  echo "$label rc=$rc ${errors:-no memcheck summary} ($(( $(date +%s) - start )) s)" \
    | tee -a "$LOGS/summary.txt"
}
for k in aiter-ext upstream; do
  # graphs at every captured size, 16 and 128 heads: replays, 136 eager decodes, reuse, replays
  job "graphs-$k" 240 python3 -m $M --aiter-tree "$tree" --kinds $k
done
for k in aiter-ext upstream; do
  # fp8 KV (sglang's persistent path): the same sequence, the schedule written at every size
  job "graphs-fp8-$k" 300 python3 -m $M --aiter-tree "$tree" --kinds $k --kv-cache-dtype fp8_e4m3
done
for k in aiter-ext upstream; do  # the same under memcheck (16 heads), both at once
  job "memcheck-$k" ${MEMCHECK_LIMIT:-500} "${MC[@]}" python3 -m $M --aiter-tree "$tree" --kinds $k --heads 16 --reuse 2000 &
  job "memcheck-fp8-$k" ${MEMCHECK_LIMIT:-500} "${MC[@]}" python3 -m $M --aiter-tree "$tree" --kinds $k --heads 16 --reuse 2000 --kv-cache-dtype fp8_e4m3 &
done
wait
grep -h '^RESULT' "$LOGS"/graphs-*.log "$LOGS"/memcheck-*.log | cut -c1-600
