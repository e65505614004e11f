#!/usr/bin/env bash
# A real VS Code for tests/e2e/test_vscode.py: code-server (VS Code's workbench served over HTTP) from
# npm into $E2E_DIR/code-server, driven by Debian's chromium. Run as root on Debian 12 with Node 20.
#
# code-server's plain `npm install` cannot work on these machines: its postinstall refuses root,
# its native modules need Debian's -dev headers, and @vscode/ripgrep's postinstall downloads ripgrep
# from GitHub (unreachable). So scripts are skipped, VS Code's own dependencies are installed
# separately, ripgrep is Debian's, and the native modules are rebuilt explicitly.
# (The steps were checked on a fresh machine of this kind; docs/editors.md says which VS Code this proves.)
set -euo pipefail

VERSION=4.100.3
E2E_DIR="${E2E_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/.e2e}"
dest="$E2E_DIR/code-server"
stamp="$dest/.ctxpress-installed-$VERSION"
entry="$dest/node_modules/code-server/out/node/entry.js"
log() { echo "vscode: $*"; }

# Debian packages: the browser, the headers of the native modules, ripgrep, a compiler for node-gyp.
packages=(chromium libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config ripgrep
          build-essential python3 git)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -f "$stamp" ] && [ -f "$entry" ]; then
  log "code-server $VERSION already installed in $dest"
  exit 0
fi

command -v node >/dev/null || { echo "vscode: node (20) is required" >&2; exit 1; }
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" = 20 ] || log "warning: code-server $VERSION declares Node 20, this is Node $node_major"

# Built beside the destination and moved in at the end: a half-done install is never taken for a done one.
stage="$dest.partial"
rm -rf "$stage"
mkdir -p "$stage"
start=$(date +%s)
step() { log "$1 ($(( $(date +%s) - start ))s)"; }
export npm_config_yes=true npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false

step "npm install code-server@$VERSION"
(cd "$stage" && npm install --ignore-scripts --no-save --loglevel=error "code-server@$VERSION" >/dev/null)

vscode="$stage/node_modules/code-server/lib/vscode"
step "npm install VS Code's own dependencies"
(cd "$vscode" && npm install --omit=dev --ignore-scripts --loglevel=error >/dev/null)
mkdir -p "$vscode/node_modules/@vscode/ripgrep/bin"
ln -sf "$(command -v rg)" "$vscode/node_modules/@vscode/ripgrep/bin/rg"

step "npm rebuild VS Code's native modules (node-pty, kerberos, ...)"
(cd "$vscode" && npm rebuild --loglevel=error >/dev/null)
# code-server loads VS Code's modules from node_modules.asar, which an npm install does not make.
ln -sfn node_modules "$vscode/node_modules.asar"

step "npm rebuild argon2"
(cd "$stage" && npm rebuild argon2 --loglevel=error >/dev/null)

touch "$stage/.ctxpress-installed-$VERSION"
rm -rf "$dest"
mv "$stage" "$dest"
step "code-server $VERSION installed in $dest"
