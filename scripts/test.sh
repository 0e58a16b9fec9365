#!/usr/bin/env bash
# Runs every test: the Rust workspace (engine, service, CLI, and the real app end to end, GPU
# tests on the software Vulkan driver where no GPU is present) and the UI's Vitest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
WGPU_BACKEND=${WGPU_BACKEND:-vulkan} cargo test --workspace
(cd ui && npm test --silent)
