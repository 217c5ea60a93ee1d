#!/usr/bin/env bash
# The self-test's graph form on the lent GPU (gpu/results/selftest.md).
#
#   bash gpu/run_selftest_evidence.sh
#
# Runs from the repository root with sglang importable (SGLANG_SITE: a folder for PYTHONPATH, as
# gpu/run_server_evidence.sh installs .whl/ there, this plugin's wheel included: sglang's loader
# finds plugins by their installed entry points) and aiter's Triton tree in .gpu-carry/aiter-git.
# The kernel doubles come in through sglang's own plugin loader in every child the self-test
# starts, as the GPU server tier installs them (testkit/doubles/server_plugin.py): the
# capture-safe references with aiter's memory contract for aiter's compiled kernels, aiter's real
# Triton unified_attention, the ROCm host answer. Writes $OUT/selftest/{versions.txt,*.txt,*.json}.
# ONLY=REGEX runs the runs whose label matches. SG12_SITE: an sglang 0.5.12 folder; with it, the page-16 case also runs there, as it comes and
# with upstream's held-back batches run (--upstream-unsafe).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${OUT:-/tmp}/selftest
mkdir -p "$out"
site=$(mktemp -d)
models=$(mktemp -d)
trap 'rm -rf "$site" "$models"' EXIT
export SGLANG_SITE=${SGLANG_SITE:-/tmp/site}
export PYTHONPATH=$site:$SGLANG_SITE:$here:$here/gpu/wheelhouse PYTHONUNBUFFERED=1
python3 -c "from pathlib import Path; from testkit.doubles.server_plugin import site_dir; site_dir(Path('$site'), gpu=True)"
export SGLANG_E2E_DOUBLES=aiter,unified,capture-safe,rocm-host,mla
export SGLANG_E2E_AITER_TREE=${SGLANG_E2E_AITER_TREE:-$here/.gpu-carry/aiter-git}
export SGLANG_E2E_AITER_MLA_TREE=${SGLANG_E2E_AITER_MLA_TREE:-$SGLANG_E2E_AITER_TREE}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache-selftest}
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  nvidia-smi -L
  python3 -c "import sglang, torch, triton; print('sglang', sglang.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$out/versions.txt"
st() {  # label, then selftest arguments; the exit status goes into the summary
  local label=$1; shift
  [[ $label =~ ${ONLY:-.} ]] || return 0
  local start; start=$(date +%s)
  python3 -m sglang_aiter_plugin selftest "$@" > "$out/$label.txt" 2> "$out/$label.err"
  echo "$label rc=$? ($(( $(date +%s) - start )) s)" | tee -a "$out/summary.txt"
}
jobs=${JOBS:-4}
st all --jobs "$jobs"
st all-json --jobs "$jobs" --json
# an operator's deployment: a Llama-class and a DeepSeek-class (MLA) config-only model, each with
# its sglang arguments (MLA decode: aiter's own mla.py from $SGLANG_E2E_AITER_MLA_TREE)
python3 -c "from pathlib import Path; from testkit.sglang_setup import write_model_dir; write_model_dir(Path('$models/llama')); write_model_dir(Path('$models/deepseek'), mla=True, aiter_mla_dims=True)"
st deploy-llama --jobs "$jobs" --json --model-path "$models/llama" --page-size 16 --tp-size 2 \
  --max-running-requests 66
st deploy-deepseek --jobs "$jobs" --json --model-path "$models/deepseek" --tp-size 4 \
  --attn-dp-size 2 --max-running-requests 66
# the same with an fp8 KV cache: sglang's persistent MLA path (its work schedule at every size)
st deploy-deepseek-fp8 --jobs "$jobs" --json --model-path "$models/deepseek" --tp-size 4 \
  --attn-dp-size 2 --max-running-requests 66 --kv-cache-dtype fp8_e4m3
# top-1 EAGLE on the Llama-class config (its own folder as the draft): the target-verify graphs
# and eager batch, ragged and unified (two-batch overlap captures above the pool of 33)
eagle=(--model-path "$models/llama" --speculative-algorithm EAGLE
  --speculative-draft-model-path "$models/llama" --speculative-num-steps 3
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --max-running-requests 33
  --enable-two-batch-overlap)
st deploy-llama-eagle --jobs "$jobs" --json "${eagle[@]}"
SGLANG_USE_AITER_UNIFIED_ATTN=1 st deploy-llama-eagle-unified --jobs "$jobs" --json "${eagle[@]}"
# the control: the decode kernel reads each sequence's second KV slot for its first (aiter-ext
# must fail these, exit status 1)
SGLANG_E2E_WRONG_KV_SLOT_FLAG=$(mktemp)
export SGLANG_E2E_WRONG_KV_SLOT_FLAG
st control-wrong-slot --jobs "$jobs" --only ragged-page1-graphs --only ragged-page16-graphs
rm -f "$SGLANG_E2E_WRONG_KV_SLOT_FLAG"
unset SGLANG_E2E_WRONG_KV_SLOT_FLAG
if [[ -n ${SG12_SITE:-} ]]; then
  PYTHONPATH=$site:$SG12_SITE:$SGLANG_SITE:$here:$here/gpu/wheelhouse \
    st page16-0.5.12 --jobs 2 --only ragged-page16-graphs
  PYTHONPATH=$site:$SG12_SITE:$SGLANG_SITE:$here:$here/gpu/wheelhouse \
    st page16-0.5.12-unsafe --jobs 2 --only ragged-page16-graphs --upstream-unsafe
fi
cat "$out/summary.txt"
