#!/usr/bin/env bash
# Installs what building and testing Minerva needs on a Debian machine: the software Vulkan
# driver (GPU tests run on it when no GPU is present) and the Python packages the tests call
# to check our files with other people's readers. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers)
dpkg -s libvulkan1 >/dev/null 2>&1 || need_apt+=(libvulkan1)
dpkg -s pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

command -v cargo >/dev/null || { echo "setup: cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
python3 -m pip install --quiet --disable-pip-version-check -r tools/requirements.txt
