#!/usr/bin/env bash
# The editor clients the end-to-end tests drive (tests/e2e), installed from the registries into
# .e2e/ (Debian's packages system-wide): the clients people run, never ones written here.
# Usage: infra/editor-clients/install.sh [vscode|tabby-agent|neovim ...]   (default: all)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export E2E_DIR="${E2E_DIR:-$root/.e2e}"
mkdir -p "$E2E_DIR"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(neovim tabby-agent vscode)
total_start=$(date +%s)
for client in "${clients[@]}"; do
  start=$(date +%s)
  echo "editor clients: installing $client…"
  bash "$here/$client.sh"
  echo "editor clients: $client ready in $(( $(date +%s) - start ))s"
done
echo "editor clients: ${clients[*]} installed in $E2E_DIR in $(( $(date +%s) - total_start ))s"
