//! Where a step's time goes. With `MINERVA_GPU_PROFILE=1` each dispatch runs in its own compute
//! pass bracketed by timestamp queries, and the totals per kernel (and grid) are printed to
//! stderr when the device is dropped; profiling adds a pass per dispatch and a wait per submit,
//! so it is off unless asked for. With `MINERVA_GPU_PROFILE=pass` (adapters with timestamps
//! inside passes) the step keeps its one pass and a timestamp follows every dispatch: each
//! kernel is charged the time from the previous one's end to its own, barrier included, so the
//! kernels' times add up to the step's. With `MINERVA_GPU_TIMING=1` steps run as usual and the host's
//! side of each read-back step (recording and submitting its pieces, then waiting) is timed instead.

use super::pipelines::Dispatch;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Timestamp pairs one query set holds (wgpu allows 4096 queries per set).
const MAX_TIMED: usize = 2048;

pub struct Profiler {
    period_ns: f64,
    /// Timestamps between the dispatches of one pass rather than a pass per dispatch.
    in_pass: bool,
    /// label → (launches, total ns)
    totals: Mutex<HashMap<String, (u64, f64)>>,
}

/// What a profiled submit left to read once the queue is idle.
pub struct Pending {
    labels: Vec<String>,
    staging: wgpu::Buffer,
}

impl Profiler {
    /// A profiler when the environment asks for one and the device has timestamp queries.
    pub fn from_env(timestamps: bool, in_pass: bool, queue: &wgpu::Queue) -> Option<Profiler> {
        let asked = std::env::var("MINERVA_GPU_PROFILE").is_ok_and(|v| !v.is_empty() && v != "0");
        if asked && !timestamps {
            eprintln!("MINERVA_GPU_PROFILE: this adapter has no timestamp queries; not profiling");
        }
        let pass_asked = Self::pass_asked();
        if pass_asked && timestamps && !in_pass {
            eprintln!("MINERVA_GPU_PROFILE=pass: no timestamps inside passes here; a pass each");
        }
        (asked && timestamps).then(|| Profiler {
            period_ns: queue.get_timestamp_period() as f64,
            in_pass: pass_asked && in_pass,
            totals: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the environment asks for timestamps inside one pass (the device then requests
    /// the feature where the adapter offers it).
    pub fn pass_asked() -> bool {
        std::env::var("MINERVA_GPU_PROFILE").is_ok_and(|v| v == "pass")
    }

    /// Records `dispatches` into `enc`, the first `MAX_TIMED` each in a timed pass of its own.
    pub fn record(
        &self,
        device: &wgpu::Device,
        enc: &mut wgpu::CommandEncoder,
        dispatches: &[&Dispatch],
    ) -> Option<Pending> {
        let timed = dispatches.len().min(MAX_TIMED);
        if timed == 0 {
            return None;
        }
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * timed as u32,
        });
        if self.in_pass {
            // Stamp 2i is the end of dispatch i - 1 (the pass's start for i = 0), 2i + 1 the end
            // of dispatch i; the odd stamps repeat as the next even ones.
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("profiled step"),
                timestamp_writes: None,
            });
            pass.write_timestamp(&set, 0);
            for (i, d) in dispatches.iter().enumerate() {
                d.record(&mut pass);
                if i < timed {
                    pass.write_timestamp(&set, 2 * i as u32 + 1);
                    if i + 1 < timed {
                        pass.write_timestamp(&set, 2 * i as u32 + 2);
                    }
                }
            }
        }
        for (i, d) in dispatches.iter().enumerate().filter(|_| !self.in_pass) {
            let timestamp_writes = (i < timed).then(|| wgpu::ComputePassTimestampWrites {
                query_set: &set,
                beginning_of_pass_write_index: Some(2 * i as u32),
                end_of_pass_write_index: Some(2 * i as u32 + 1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("profiled"),
                timestamp_writes,
            });
            d.record(&mut pass);
        }
        let bytes = 16 * timed as u64;
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile read"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.resolve_query_set(&set, 0..2 * timed as u32, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
        let labels = dispatches[..timed]
            .iter()
            .map(|d| format!("{} {:?}", d.label, d.groups))
            .collect();
        Some(Pending { labels, staging })
    }

    /// Adds a finished submit's times to the totals (the queue must be idle).
    pub fn collect(&self, device: &wgpu::Device, pending: Pending) {
        let slice = pending.staging.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        let _ = device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        });
        let Ok(view) = slice.get_mapped_range() else {
            return;
        };
        let stamps: Vec<u64> = bytemuck::pod_collect_to_vec(&view);
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        for (label, pair) in pending.labels.into_iter().zip(stamps.chunks_exact(2)) {
            let ns = pair[1].saturating_sub(pair[0]) as f64 * self.period_ns;
            let e = totals.entry(label).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += ns;
        }
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        let totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<_> = totals.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let all: f64 = rows.iter().map(|r| r.1 .1).sum();
        eprintln!("GPU profile: {:.3} ms in {} kernels", all / 1e6, rows.len());
        eprintln!(
            "{:>10} {:>8} {:>10} {:>6}  kernel [grid]",
            "total ms", "launches", "mean µs", "share"
        );
        for (label, (n, ns)) in rows.iter().take(40) {
            eprintln!(
                "{:>10.3} {:>8} {:>10.2} {:>5.1}%  {label}",
                ns / 1e6,
                n,
                ns / 1e3 / *n as f64,
                100.0 * ns / all.max(1.0)
            );
        }
    }
}

/// Host-side durations of the steps that end in a read back (`MINERVA_GPU_TIMING=1`).
pub struct StepTimer {
    /// (dispatches, record + submit, wait) per step.
    steps: Mutex<Vec<(usize, Duration, Duration)>>,
}

/// Whether `MINERVA_GPU_TIMING` asks for the host's timings.
pub fn timing_asked() -> bool {
    std::env::var("MINERVA_GPU_TIMING").is_ok_and(|v| !v.is_empty() && v != "0")
}

impl StepTimer {
    pub fn from_env() -> Option<StepTimer> {
        timing_asked().then(|| StepTimer {
            steps: Mutex::new(Vec::new()),
        })
    }

    pub fn add(&self, dispatches: usize, submit: Duration, wait: Duration) {
        let mut steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        steps.push((dispatches, submit, wait));
    }
}

impl Drop for StepTimer {
    fn drop(&mut self) {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        // Group by dispatch count: decode steps share one count, prefill chunks another.
        let mut counts: Vec<usize> = steps.iter().map(|s| s.0).collect();
        counts.sort_unstable();
        counts.dedup();
        eprintln!("GPU step timing (host side, medians):");
        eprintln!(
            "{:>10} {:>6} {:>10} {:>10}",
            "dispatches", "steps", "submit µs", "wait µs"
        );
        for n in counts {
            let of = |f: fn(&(usize, Duration, Duration)) -> Duration| {
                let mut v: Vec<f64> = steps
                    .iter()
                    .filter(|s| s.0 == n)
                    .map(|s| f(s).as_secs_f64() * 1e6)
                    .collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let steps_n = steps.iter().filter(|s| s.0 == n).count();
            eprintln!(
                "{:>10} {:>6} {:>10.1} {:>10.1}",
                n,
                steps_n,
                of(|s| s.1),
                of(|s| s.2)
            );
        }
    }
}
