#!/usr/bin/env bash
# Run the test suite against each sglang release in SGLANG_TEST_VERSIONS (default: the CI releases,
# tools/sglang-releases ci).
#
#   bash tools/test.sh [PYTEST ARGS...]
#
# Creates the environment first when it is missing (tools/env.sh), then runs ruff, mypy and pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
versions=${SGLANG_TEST_VERSIONS:-$(python3 tools/sglang-releases ci)}
[[ -f .venv/.complete && -d .venv/opt/amd-aiter/aiter ]] || bash tools/env.sh >/dev/null
.venv/bin/ruff check sglang_aiter_plugin tests testkit benchmarks gpu
.venv/bin/mypy
status=0
for v in $versions; do
  echo "=================== sglang $v ==================="
  bash tools/with-sglang "$v" .venv/bin/python -m pytest -q -p no:cacheprovider "$@" || status=1
done
exit $status
