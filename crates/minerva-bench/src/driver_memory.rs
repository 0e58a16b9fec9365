//! The GPU driver's figure for a bench child's memory, where the driver gives one: NVML on
//! NVIDIA (loaded at run time; no NVIDIA driver, no figure). NVML names processes by host pid,
//! so inside a container the child is not found; then the figure is the rise of the devices'
//! used memory over what it was before the child started, and says so.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a running child is sampled.
const EVERY: Duration = Duration::from_millis(50);

/// What the driver said about one child: the most it held while it ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriverMemory {
    pub peak_bytes: u64,
    /// True when the figure is the process's own; false when it is the devices' used memory
    /// less what was used before the child started.
    pub per_process: bool,
}

/// NVML, opened once for the whole comparison.
pub struct Driver {
    nvml: Arc<Nvml>,
}

/// A child being watched; [`Watch::finish`] stops sampling and gives the peak.
pub struct Watch {
    done: Arc<AtomicBool>,
    thread: JoinHandle<(u64, u64)>,
    baseline: u64,
}

impl Driver {
    /// None where NVML cannot be loaded (no NVIDIA driver) or sees no device.
    pub fn open() -> Option<Driver> {
        let nvml = Nvml::init().ok()?;
        (nvml.device_count().ok()? > 0).then(|| Driver {
            nvml: Arc::new(nvml),
        })
    }

    /// Each device's name and total memory, as the driver reports them.
    pub fn devices(&self) -> Vec<(String, u64)> {
        (0..self.nvml.device_count().unwrap_or(0))
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                Some((d.name().ok()?, d.memory_info().ok()?.total))
            })
            .collect()
    }

    /// Starts sampling the memory of process `pid`.
    pub fn watch(&self, pid: u32) -> Watch {
        let baseline = used_by_devices(&self.nvml);
        let done = Arc::new(AtomicBool::new(false));
        let (nvml, stop) = (self.nvml.clone(), done.clone());
        let thread = std::thread::spawn(move || {
            let (mut own, mut devices) = (0u64, 0u64);
            loop {
                own = own.max(used_by_process(&nvml, pid));
                devices = devices.max(used_by_devices(&nvml));
                if stop.load(Ordering::Relaxed) {
                    return (own, devices);
                }
                std::thread::sleep(EVERY);
            }
        });
        Watch {
            done,
            thread,
            baseline,
        }
    }
}

impl Watch {
    /// The peak while the child ran; None when NVML saw nothing of it.
    pub fn finish(self) -> Option<DriverMemory> {
        self.done.store(true, Ordering::Relaxed);
        let (own, devices) = self.thread.join().ok()?;
        if own > 0 {
            return Some(DriverMemory {
                peak_bytes: own,
                per_process: true,
            });
        }
        let rise = devices.saturating_sub(self.baseline);
        (rise > 0).then_some(DriverMemory {
            peak_bytes: rise,
            per_process: false,
        })
    }
}

/// The memory process `pid` holds on all devices (compute and graphics contexts both: a
/// Vulkan compute process may be listed under either).
fn used_by_process(nvml: &Nvml, pid: u32) -> u64 {
    let mut by_device = 0;
    for i in 0..nvml.device_count().unwrap_or(0) {
        let Ok(device) = nvml.device_by_index(i) else {
            continue;
        };
        let listed = [
            device.running_compute_processes(),
            device.running_graphics_processes(),
        ];
        // A process in both lists holds one allocation: take the larger, not the sum.
        let mut here = 0;
        for p in listed.into_iter().flatten().flatten() {
            if let (true, UsedGpuMemory::Used(bytes)) = (p.pid == pid, p.used_gpu_memory) {
                here = here.max(bytes);
            }
        }
        by_device += here;
    }
    by_device
}

fn used_by_devices(nvml: &Nvml) -> u64 {
    (0..nvml.device_count().unwrap_or(0))
        .filter_map(|i| nvml.device_by_index(i).ok()?.memory_info().ok())
        .map(|m| m.used)
        .sum()
}
