#!/usr/bin/env bash
# Tabby's agent (the LSP server that Tabby's VS Code, IntelliJ and Vim plugins start), pinned, from the
# npm registry into $E2E_DIR/tabby-agent: tests/e2e/test_tabby_agent.py drives it against serve-http.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
E2E_DIR="${E2E_DIR:-$(cd "$here/../.." && pwd)/.e2e}"
version="1.5.0"
dest="$E2E_DIR/tabby-agent"
cli="$dest/node_modules/tabby-agent/dist/cli.js"
manifest="$dest/node_modules/tabby-agent/package.json"

if [ -f "$cli" ] && [ -f "$manifest" ] \
    && [ "$(node -p "require('$manifest').version" 2>/dev/null)" = "$version" ]; then
  echo "tabby-agent: $version already installed in $dest"
  exit 0
fi

command -v npm >/dev/null || { echo "tabby-agent: npm (Node 18+) is needed" >&2; exit 1; }
mkdir -p "$dest"
cd "$dest"
# A private package.json keeps npm from walking up into another project's.
[ -f package.json ] || echo '{"name": "ctxpress-e2e-tabby-agent", "private": true}' > package.json
echo "tabby-agent: npm install tabby-agent@$version into $dest"
# --ignore-scripts: install scripts of the dependencies (win-ca, mac-ca) would only do platform work
# or fetch; the agent's dist/ is complete in the tarball.
npm install --no-audit --no-fund --ignore-scripts --save-exact "tabby-agent@$version"
[ -f "$cli" ] || { echo "tabby-agent: $cli missing after install" >&2; exit 1; }
echo "tabby-agent: $version installed ($cli)"
