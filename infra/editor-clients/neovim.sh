#!/usr/bin/env bash
# Neovim from Debian (0.7.2 on Debian 12): tests/e2e/test_neovim.py attaches its built-in LSP client
# to `ctxpress lsp`. System-wide, as Debian's package is; apt's lists are refreshed only when the
# package is missing, so a machine that has it installs nothing and fetches nothing.
set -euo pipefail
if [ "$(dpkg-query -W -f='${Status}' neovim 2>/dev/null)" = "install ok installed" ]; then
  echo "neovim: Debian's package already installed: $(nvim --version | head -n 1)"
  exit 0
fi
command -v apt-get >/dev/null || { echo "neovim: apt-get not found; install Neovim 0.7+ yourself" >&2; exit 1; }
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "neovim: apt-get update"
$sudo apt-get update -q
echo "neovim: apt-get install -y neovim"
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends neovim
echo "neovim: $(nvim --version | head -n 1) installed"
