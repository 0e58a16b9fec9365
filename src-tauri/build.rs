//! Tauri's build step: the app's configuration, capabilities and icons compiled in.
fn main() {
    tauri_build::build()
}
