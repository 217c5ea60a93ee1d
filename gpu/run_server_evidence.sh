#!/usr/bin/env bash
# Real sglang servers on the lent GPU with decode CUDA graphs (gpu/results/server_graphs.md).
#
#   bash gpu/run_server_evidence.sh [PYTEST ARGS...]     (default: tests/e2e/gpu)
#
# Runs from the repository root, with the wheels of gpu/README.md in .whl/ (sglang, the sgl_kernel
# import stub, the import set and the HTTP server's packages, and this plugin's own wheel), and
# aiter's Triton tree in .gpu-carry/aiter-git (AITER_ORIGIN inside), and for the MLA servers
# aiter's mla.py in .gpu-carry/aiter-e4048607 (or SGLANG_E2E_AITER_MLA_TREE). SGLANG_SITE: an sglang
# already installed (a folder for PYTHONPATH) instead of .whl/'s; LABEL: the name of this run's
# output folder under $OUT. Writes $OUT/$LABEL/{pytest.log,runs.json,servers.tgz}.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
label=${LABEL:-run}
out=${OUT:-/tmp}/$label
mkdir -p "$out"
if [[ -z ${SGLANG_SITE:-} ]]; then
  SGLANG_SITE=/tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SGLANG_SITE" .whl/*.whl || exit 1
fi
export PYTHONPATH=$SGLANG_SITE:$here PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache-servers}
export SGLANG_E2E_AITER_TREE=${SGLANG_E2E_AITER_TREE:-$here/.gpu-carry/aiter-git}
# aiter's own aiter/mla.py for the MLA servers (tests/e2e/gpu/test_mla.py skips without it)
if [[ -z ${SGLANG_E2E_AITER_MLA_TREE:-} && -f $here/.gpu-carry/aiter-e4048607/aiter/mla.py ]]; then
  export SGLANG_E2E_AITER_MLA_TREE=$here/.gpu-carry/aiter-e4048607
fi
export SGLANG_GPU_E2E_OUT=$out/e2e
{
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  nvidia-smi -L
  python3 -c "import sglang, torch, triton; print('sglang', sglang.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
  compute-sanitizer --version | tail -1
} 2>&1 | tee "$out/versions.txt"
python3 -m pytest -p no:cacheprovider -rA -v "${@:-tests/e2e/gpu}" 2>&1 | tee "$out/pytest.log"
status=${PIPESTATUS[0]}
[[ -d $out/e2e ]] && tar czf "$out/servers.tgz" -C "$out/e2e" . && rm -rf "$out/e2e/servers"
exit "$status"
