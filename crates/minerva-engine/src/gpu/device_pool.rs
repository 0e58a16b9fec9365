//! Devices kept for the next load: a process that loads models one after another (the app, the
//! server) makes a device ahead, at its start, and keeps the device of a model it unloads, with
//! the kernels built on it, so that a load takes a ready device instead of waiting 70–100 ms for
//! the driver to make one, and a model like one before it finds its kernels built
//! (benches/GPU.md, entries 74 and 104). Off until `make_ahead` turns it on: a process that loads
//! one model and exits gains nothing from it.

use super::adapters::{choose_adapter, request_device};
use super::context::GpuOptions;
use super::pipelines::Pipelines;
use super::staging::Staging;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Idle devices kept at most: one per adapter a process uses is the common case.
const MOST: usize = 2;

/// An idle device, with the adapter and features it was made with, the kernels built on it, and
/// the staging ring the next load writes its weights through, made while the device waits.
pub(super) struct Kept {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub pipelines: Arc<Pipelines>,
    pub staging: Option<Staging>,
    adapter: String,
    features: wgpu::Features,
}

static KEEP: AtomicBool = AtomicBool::new(false);
static IDLE: Mutex<Vec<Kept>> = Mutex::new(Vec::new());
/// The device being made ahead, and the time making it took once it is made (none where no
/// device was wanted).
static AHEAD: Mutex<Option<JoinHandle<Option<Duration>>>> = Mutex::new(None);

/// Turns keeping on and, on a thread of its own, makes a device for the options `wanted` gives
/// there (none: no device is wanted), unless one is being made already. Errors (no adapter, a
/// driver that fails) are left to the load, which meets them again.
pub fn make_ahead(wanted: impl FnOnce() -> Option<GpuOptions> + Send + 'static) {
    KEEP.store(true, Ordering::SeqCst);
    let mut ahead = AHEAD.lock().unwrap_or_else(|p| p.into_inner());
    if ahead.is_some() {
        return;
    }
    *ahead = Some(std::thread::spawn(move || {
        let start = Instant::now();
        let opts = wanted()?;
        let chosen = choose_adapter(&opts).ok()?;
        let (device, queue) = request_device(&chosen).ok()?;
        let pipelines = Arc::new(Pipelines::default());
        put(device, queue, pipelines, &chosen.info.name, chosen.features);
        Some(start.elapsed())
    }));
}

/// Waits for the device being made ahead, if any: how long listing the adapters and making it
/// took (none where none was made).
pub fn wait_ahead() -> Option<Duration> {
    let handle = AHEAD.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    handle.join().ok().flatten()
}

/// An idle device made on adapter `adapter` with `features`, if one is kept. A device still
/// being made ahead is waited for: it is further along than a new one would be.
pub(super) fn take(adapter: &str, features: wgpu::Features) -> Option<Kept> {
    if !KEEP.load(Ordering::SeqCst) {
        return None;
    }
    wait_ahead();
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    let i = idle
        .iter()
        .position(|k| k.adapter == adapter && k.features == features)?;
    let kept = idle.swap_remove(i);
    // Let go of what the device's last model left (buffers are freed once the device is polled).
    let _ = kept.device.poll(wgpu::PollType::Wait {
        submission_index: None,
        timeout: Some(Duration::from_secs(5)),
    });
    Some(kept)
}

/// Keeps a healthy device whose model unloaded, with the kernels built on it, while keeping is
/// on and there is room.
pub(super) fn put(
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipelines: Arc<Pipelines>,
    adapter: &str,
    features: wgpu::Features,
) {
    if !KEEP.load(Ordering::SeqCst) {
        return;
    }
    if idle() >= MOST {
        return;
    }
    let staging = Staging::made(&device).ok();
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    if idle.len() < MOST {
        idle.push(Kept {
            device,
            queue,
            pipelines,
            staging,
            adapter: adapter.to_string(),
            features,
        });
    }
}

/// Whether this process keeps devices (`make_ahead` was called).
pub fn keeping() -> bool {
    KEEP.load(Ordering::SeqCst)
}

/// Idle devices kept now.
pub fn idle() -> usize {
    IDLE.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// Held by the library's tests that make devices, so that none takes another's kept device.
#[cfg(test)]
pub(crate) static TEST_DEVICES: Mutex<()> = Mutex::new(());

/// A context for one of the library's tests, made while it holds `TEST_DEVICES` (returned with
/// it). Without an adapter: None after a loud SKIPPED line, or a panic where CI is set.
#[cfg(test)]
pub(crate) fn test_context() -> Option<(std::sync::MutexGuard<'static, ()>, crate::gpu::GpuContext)>
{
    let one = TEST_DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    match crate::gpu::GpuContext::new(&GpuOptions::default()) {
        Ok(ctx) => Some((one, ctx)),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: no GPU adapter ({e})");
            None
        }
        Err(e) => panic!("CI is set but the GPU backend found no device: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuContext;

    fn works(ctx: &GpuContext) {
        let data: Vec<u32> = (0..64).map(|i| i * 7 + 1).collect();
        let buf = ctx.storage_with("pool check", &data);
        assert_eq!(ctx.read_u32(&buf, 0, 64).expect("read back"), data);
    }

    /// A device made ahead is what the next context takes; the kernels asked for while
    /// recording are listed once; when that context goes, its device is kept with the kernels
    /// built on it and the next one takes both, working; a destroyed (lost) device is not kept.
    #[test]
    fn devices_made_ahead_and_left_by_a_model_are_taken_by_the_next() {
        let _one = TEST_DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        let opts = GpuOptions::default();
        if let Err(e) = choose_adapter(&opts) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but no GPU adapter was found: {e}"
            );
            eprintln!("SKIPPED: no GPU adapter ({e})");
            return;
        }
        let ahead = opts.clone();
        make_ahead(move || Some(ahead));
        assert!(wait_ahead().is_some(), "a device was being made ahead");
        assert_eq!(idle(), 1);
        let first = GpuContext::new(&opts).expect("a context");
        assert!(first.kept(), "the device made ahead was taken");
        assert_eq!(idle(), 0);
        works(&first);
        let mut norm = crate::gpu::shader::Defines::new();
        norm.insert("PLAIN".into(), String::new());
        first.pipelines().record();
        let built = first.pipelines().get(&first, "norm.wgsl", &norm, "main");
        assert!(built.is_ok(), "a kernel builds: {:?}", built.err());
        let found = first.pipelines().get(&first, "norm.wgsl", &norm, "main");
        assert!(
            Arc::ptr_eq(&built.unwrap(), &found.unwrap()),
            "found, not built again"
        );
        let asked = first.pipelines().recorded();
        assert_eq!(asked.len(), 1, "asked for twice, recorded once: {asked:?}");
        assert_eq!(
            (asked[0].0.as_str(), asked[0].3.as_str()),
            ("norm.wgsl", "main")
        );
        drop(first);
        assert_eq!(idle(), 1, "the first context's device was kept");
        let second = GpuContext::new(&opts).expect("a second context");
        assert!(second.kept());
        assert_eq!(
            second.pipelines().len(),
            1,
            "the kernel built before came with it"
        );
        works(&second);
        second.device.destroy();
        second.wait().ok();
        drop(second);
        assert_eq!(idle(), 0, "a destroyed device is not kept");
        let third = GpuContext::new(&opts).expect("a third context");
        assert!(!third.kept(), "with none kept, a device is made");
        works(&third);
    }
}
