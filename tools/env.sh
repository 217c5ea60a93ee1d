#!/usr/bin/env bash
# Create the project's environment and run the doctor.
#
#   bash tools/env.sh [SGLANG_VERSION]      (default: the base release, tools/sglang-releases base)
#
# .venv gets CPython's venv, the pinned import dependencies of sglang (tools/requirements-sglang.txt,
# pinned by tools/constraints.txt), the base sglang release from PyPI with --no-deps, and this project in
# editable mode. Another release is installed beside it (tools/with-sglang), never over it.
# amd-aiter (tools/requirements-test-aiter.txt) goes to .venv/opt/amd-aiter, off sys.path: the
# CPU tests run its Triton kernels from there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
base=$("$py" "$root/tools/sglang-releases" base)
version=${1:-${SGLANG_VERSION:-$base}}
venv="$root/.venv"

if [[ ! -x $venv/bin/python || ! -f $venv/.deps && ! -f $venv/.complete ]]; then
  echo "== creating $venv (sglang $base, --no-deps, plus its pinned import dependencies)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install -r "$root/tools/requirements-sglang.txt" -c "$root/tools/constraints.txt" 2>&1 | grep -v '^WARNING: Location' || true
  "${pip[@]}" install --no-deps "sglang==$base" 2>&1 | grep -v '^WARNING: Location' || true
  touch "$venv/.deps"
fi
# hatchling (the build backend) builds from the tree without writing into it; editables maps the
# package alone into the environment, as an installed wheel would
if [[ ! -f $venv/.complete ]] || ! "$venv/bin/python" -c "import hatchling, editables" 2>/dev/null
then
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install -c "$root/tools/constraints.txt" hatchling editables 2>&1 \
    | grep -v '^WARNING: Location' || true
  "${pip[@]}" install --no-deps --no-build-isolation -e "$root" 2>&1 \
    | grep -v '^WARNING: Location' || true
  "$venv/bin/python" -c "import sglang, torch, pluggy, sglang_aiter_plugin" \
    || { echo "environment is incomplete" >&2; exit 1; }
  touch "$venv/.complete"
fi
# what setuptools builds used to leave in the tree: an egg-info there keeps the plugin loadable
# from the repository root after `pip uninstall`
rm -rf "$root"/*.egg-info "$root/build"
aiter_tree="$venv/opt/amd-aiter"
if [[ ! -d $aiter_tree/aiter ]]; then
  echo "== installing amd-aiter (its Triton kernels, for the CPU tests) into $aiter_tree"
  "$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps --no-compile \
    --target "$aiter_tree" -r "$root/tools/requirements-test-aiter.txt" 2>&1 \
    | grep -v '^WARNING: Location' || true
  [[ -d $aiter_tree/aiter ]] || { echo "could not install amd-aiter into $aiter_tree" >&2; exit 1; }
fi
exec bash "$root/tools/with-sglang" "$version" "$venv/bin/sglang-aiter-plugin" doctor
