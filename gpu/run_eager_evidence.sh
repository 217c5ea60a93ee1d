#!/usr/bin/env bash
# Eager batches at sglang's MLP-sync padded size on the lent GPU (see gpu/results/eager_batches.md).
# One process per job, so a fault in one cannot poison the next. Runs from a folder holding
# sglang_aiter_plugin/, tests/{backend,doubles}/ and gpu/; sglang 0.5.23 must be importable.
# Logs go to $OUT. ONLY=REGEX runs the jobs whose label matches.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
E=gpu.eager_batches
MC=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 POOL_GPU_MAX_LEN=64 compute-sanitizer --tool memcheck --print-limit 20)
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
compute-sanitizer --version | tail -1
job() {  # label timeout command...
  local label=$1 limit=$2; shift 2
  [[ $label =~ ${ONLY:-.} ]] || return 0
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$label.log" 2>&1
  echo "$label rc=$? $((SECONDS - start))s"
}
for k in aiter-ext upstream; do
  # decode, idle and extend at the padded size, ragged and unified decode, graphs off, under
  # memcheck with every tensor its own allocation (real rows compared with a torch reference)
  job "memcheck-eager-0.5.23-$k" 110 "${MC[@]}" python3 -m $E --kinds $k
  # FULL=1: also without the sanitizer, with longer contexts (1-599 tokens)
  [[ ${FULL:-0} == 1 ]] && job "eager-0.5.23-$k" 90 python3 -m $E --kinds $k
done
grep -h "ERROR SUMMARY" "$OUT"/memcheck-*.log
