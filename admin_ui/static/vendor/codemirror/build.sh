#!/usr/bin/env bash
# Rebuilds codemirror.js (CodeMirror 6 for the template editor) from the pinned package-lock.json.
# Run at vendoring time only: the server serves the committed bundle, nothing is built at run time.
#   bash admin_ui/static/vendor/codemirror/build.sh
# Needs node and npm (e.g. tests/interop/setup_node_tools.sh puts them in .tools/node-venv/bin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../../../.." && pwd)"
if ! command -v node >/dev/null && [[ -x "$repo_root/.tools/node-venv/bin/node" ]]; then
    export PATH="$repo_root/.tools/node-venv/bin:$PATH"
fi
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
# --alias: lang-jinja's HTML base is replaced by plain text (see plain-text.js).
npx esbuild entry.js --bundle --format=esm --minify --legal-comments=none --target=es2020 \
    --alias:@codemirror/lang-html=./plain-text.js --metafile=meta.json --outfile=codemirror.js
# The licence of every package that ended up in the bundle (esbuild's metafile lists its inputs).
{
    echo "codemirror.js bundles these npm packages (versions in package-lock.json). Their licences follow."
    for pkg in $(node -e '
        const inputs = Object.keys(require("./meta.json").inputs);
        const found = new Set(inputs.map(p => (p.match(/^node_modules\/((@[^/]+\/)?[^/]+)/) || [])[1]).filter(Boolean));
        for (const name of [...found].sort()) console.log("node_modules/" + name);'); do
        name="${pkg#node_modules/}"
        version="$(node -p "require('./$pkg/package.json').version")"
        echo
        echo "================================================================ $name $version"
        cat "$pkg/LICENSE"
    done
} > THIRD-PARTY-LICENSES.txt
cp node_modules/@codemirror/view/LICENSE LICENSE
rm -rf node_modules meta.json
ls -l codemirror.js
echo "gzip: $(gzip -9 -c codemirror.js | wc -c) bytes"
