#!/usr/bin/env bash
# Runs every test: the Rust workspace (engine, service, CLI, and the real app end to end, GPU
# tests on the software Vulkan driver where no GPU is present), the app with a remote engine, the
# Debian package, and the UI's Vitest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
WGPU_BACKEND=${WGPU_BACKEND:-vulkan} cargo test --workspace
# The app with a second `minerva serve` as its remote engine (both binaries as the tests built
# them).
xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- \
  python3 tests/e2e/remote_app.py --app target/debug/minerva-app --minerva target/debug/minerva \
  --model .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf --out target/e2e-screenshots
# The Debian package, bundled from the app binary the tests just built (no second build), then
# unpacked and started as a user would.
rm -rf target/debug/bundle/deb
ui/node_modules/.bin/tauri bundle --debug --bundles deb
xvfb-run -a -s "-screen 0 1280x800x24" dbus-run-session -- \
  python3 tests/e2e/package.py --deb target/debug/bundle/deb/*.deb --out target/e2e-screenshots
(cd ui && npm test --silent)
