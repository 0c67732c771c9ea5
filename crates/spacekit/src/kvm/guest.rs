//! The VM, its memory and its vCPU threads.

use std::format;
use std::os::unix::thread::JoinHandleExt;
use std::string::ToString;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::vec::Vec;

use kvm_bindings::{
    kvm_enable_cap, kvm_regs, kvm_userspace_memory_region, KVM_MEM_LOG_DIRTY_PAGES,
};
use kvm_ioctls::{Cap, Kvm, VcpuExit, VcpuFd, VmFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::error::{ioctl_err, KvmError};
use super::layout::{self, param, Layout, GUEST_CODE, MAX_VCPUS, PAGE};
use super::ring::RingSet;
use super::throttle::Throttle;
use crate::dirty::{DirtyBitmap, VmmBitmap};

/// Guest memory as the VMM sees it: vm-memory's mmap backend with spacekit's
/// dirty bitmap, so every host write through it is logged.
pub type GuestMem = GuestMemoryMmap<VmmBitmap>;

/// The pages a guest's vCPUs write.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Workload {
    /// Random pages, uniform over the region.
    Uniform,
    /// A hot set (the region's first `hot_pages` pages) that takes
    /// `hot_percent` of the writes; the rest are uniform over the region.
    Hot {
        /// Pages in the hot set.
        hot_pages: u64,
        /// Share of writes that go to the hot set, 0..=100.
        hot_percent: u8,
    },
    /// The region's pages in order, wrapping around.
    Sweep,
    /// No writes: the vCPUs halt (the host resumes them every millisecond
    /// to look at the parameter page).
    Idle,
}

impl Workload {
    fn code(self) -> u32 {
        match self {
            Workload::Uniform => 0,
            Workload::Hot { .. } => 1,
            Workload::Sweep => 2,
            Workload::Idle => 3,
        }
    }
}

impl core::str::FromStr for Workload {
    type Err = KvmError;

    /// `uniform`, `hot` (1,024 hot pages taking 90% of the writes),
    /// `hot:PAGES:PERCENT`, `sweep` or `idle`.
    fn from_str(s: &str) -> Result<Self, KvmError> {
        let bad = || KvmError::BadConfig {
            reason: format!("workload `{s}`: uniform, hot[:PAGES:PERCENT], sweep or idle"),
        };
        let mut parts = s.split(':');
        let w = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("uniform"), None, ..) => Workload::Uniform,
            (Some("sweep"), None, ..) => Workload::Sweep,
            (Some("idle"), None, ..) => Workload::Idle,
            (Some("hot"), None, ..) => Workload::Hot {
                hot_pages: 1024,
                hot_percent: 90,
            },
            (Some("hot"), Some(p), Some(c), None) => Workload::Hot {
                hot_pages: p.parse().map_err(|_| bad())?,
                hot_percent: c.parse().ok().filter(|c| *c <= 100).ok_or_else(bad)?,
            },
            _ => return Err(bad()),
        };
        Ok(w)
    }
}

/// How KVM reports the pages the guest dirties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirtyMode {
    /// `KVM_GET_DIRTY_LOG`, which returns and clears the log in one call.
    Log,
    /// `KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2`: `KVM_GET_DIRTY_LOG` then
    /// `KVM_CLEAR_DIRTY_LOG` of just the harvested pages.
    ClearLog,
    /// `KVM_CAP_DIRTY_LOG_RING`: a ring of `entries` (slot, page) entries per
    /// vCPU, reset with `KVM_RESET_DIRTY_RINGS`.
    Ring {
        /// Entries per vCPU ring (a power of two; KVM's limits apply).
        entries: u32,
    },
}

impl core::str::FromStr for DirtyMode {
    type Err = KvmError;

    /// `log`, `clear`, `ring` (65,536 entries per vCPU) or `ring:ENTRIES`.
    fn from_str(s: &str) -> Result<Self, KvmError> {
        match s.split_once(':') {
            None if s == "log" => Ok(DirtyMode::Log),
            None if s == "clear" => Ok(DirtyMode::ClearLog),
            None if s == "ring" => Ok(DirtyMode::Ring { entries: 65536 }),
            Some(("ring", n)) if n.parse::<u32>().is_ok() => Ok(DirtyMode::Ring {
                entries: n.parse().unwrap_or(0),
            }),
            _ => Err(KvmError::BadConfig {
                reason: format!("dirty mode `{s}`: log, clear, ring or ring:ENTRIES"),
            }),
        }
    }
}

/// A guest to build.
#[derive(Clone, Debug)]
pub struct GuestConfig {
    /// Guest memory in bytes, a multiple of 2 MiB.
    pub mem_size: u64,
    /// vCPUs, 1..=63.
    pub vcpus: u32,
    /// What the vCPUs write.
    pub workload: Workload,
    /// Target writes per second over all vCPUs (0 = as fast as they can).
    pub writes_per_sec: u64,
    /// Writes per vCPU before it stops writing (0 = no limit).
    pub max_writes: u64,
    /// Seed of the vCPUs' random streams.
    pub seed: u64,
    /// The dirty-tracking mode.
    pub dirty: DirtyMode,
    /// Percent of the region's pages the loader fills with non-zero bytes
    /// before the vCPUs start (0..=100; the rest stay zero), like a booted
    /// guest's used memory: which pages is a hash of their index and the
    /// seed.
    pub fill_percent: u8,
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig {
            mem_size: 64 << 20,
            vcpus: 1,
            workload: Workload::Uniform,
            writes_per_sec: 0,
            max_writes: 0,
            seed: 1,
            dirty: DirtyMode::Log,
            fill_percent: 0,
        }
    }
}

impl GuestConfig {
    /// Checks what [`Guest::start`] refuses without asking the host: the
    /// memory size (a non-zero multiple of 2 MiB with room for the guest's
    /// 64 pages of code and tables), the vCPU count, the hot set, and a
    /// ring's entries (a power of two of at least 256: one page; the host's
    /// own maximum is checked when the guest starts).
    ///
    /// # Errors
    /// [`KvmError::BadConfig`].
    pub fn check(&self) -> Result<(), KvmError> {
        let bad = |reason: std::string::String| Err(KvmError::BadConfig { reason });
        let Some(layout) = Layout::new(self.mem_size) else {
            return bad(format!(
                "memory size {} must be a non-zero multiple of 2 MiB with room for 64 pages",
                self.mem_size
            ));
        };
        if self.fill_percent > 100 {
            return bad(format!("fill of {}% (0..=100)", self.fill_percent));
        }
        if self.vcpus == 0 || self.vcpus > MAX_VCPUS {
            return bad(format!("{} vCPUs (1..={MAX_VCPUS})", self.vcpus));
        }
        if let Workload::Hot {
            hot_pages,
            hot_percent,
        } = self.workload
        {
            if hot_pages == 0 || hot_pages > layout.region_pages || hot_percent > 100 {
                return bad(format!(
                    "hot set of {hot_pages} pages at {hot_percent}% (region: {} pages)",
                    layout.region_pages
                ));
            }
        }
        if let DirtyMode::Ring { entries } = self.dirty {
            if !entries.is_power_of_two() || u64::from(entries) * 16 < PAGE {
                return bad(format!(
                    "ring of {entries} entries: a power of two of at least {}",
                    PAGE / 16
                ));
            }
        }
        Ok(())
    }
}

/// What the host has asked of the vCPUs, and how many have answered.
#[derive(Default)]
struct RunState {
    /// Bumped by every `resume`, so a waiting vCPU knows to go back in.
    epoch: u64,
    /// vCPUs outside the guest, waiting (paused or at their write quota).
    waiting: u32,
    stop: bool,
}

pub(crate) struct Shared {
    state: Mutex<RunState>,
    cv: Condvar,
    /// The parameter page's `cmd` word, which the guest polls.
    cmd: *const AtomicU32,
    /// The VMM log (to record the host's own writes to `cmd`).
    vmm: Arc<DirtyBitmap>,
    cmd_gpa: u64,
    ring: Option<Arc<RingSet>>,
    throttle: Arc<Throttle>,
}

// SAFETY: `cmd` points into the guest memory mapping, which the `Guest` owns
// and unmaps only after every vCPU thread holding a `Shared` has been joined;
// it is only accessed atomically.
unsafe impl Send for Shared {}
// SAFETY: as above; every field is otherwise Sync.
unsafe impl Sync for Shared {}

impl Shared {
    fn set_cmd(&self, v: u32) {
        // SAFETY: see the Send impl: the pointer is valid and aligned for the
        // guest's lifetime.
        unsafe { &*self.cmd }.store(v, Ordering::SeqCst);
        // A host write into guest memory: log it like any other, so the
        // destination gets the final value.
        let _ = self.vmm.mark(self.cmd_gpa, 4);
    }
}

/// What [`Guest::restore`] calls to fill the guest's memory.
pub type Fill<'a> = dyn FnMut(&GuestMem) -> Result<(), KvmError> + 'a;

/// A running VM whose vCPUs dirty its memory.
pub struct Guest {
    config: GuestConfig,
    layout: Layout,
    // Field order matters for drop: threads are joined in `Drop`, then the
    // VM, then the memory.
    threads: Vec<JoinHandle<Result<(), KvmError>>>,
    shared: Arc<Shared>,
    vm: Arc<VmFd>,
    _kvm: Kvm,
    memory: GuestMem,
    host: *mut u8,
    vmm_log: Arc<DirtyBitmap>,
    tsc_khz: u32,
}

// SAFETY: `host` is the base of the mapping owned by `memory`; it is used only
// for atomic reads of the guest's counters.
unsafe impl Send for Guest {}

impl Guest {
    /// Builds the VM, loads the guest, and starts its vCPUs (they run until
    /// [`Guest::stop`] or drop).
    ///
    /// # Errors
    /// [`KvmError::Unavailable`] without a usable `/dev/kvm`;
    /// [`KvmError::BadConfig`] for a size or vCPU count this guest cannot
    /// have; [`KvmError::Map`] when the host cannot map the memory;
    /// [`KvmError::MissingCapability`] for a dirty mode the kernel lacks;
    /// [`KvmError::Ioctl`] for any other KVM failure.
    pub fn start(config: GuestConfig) -> Result<Guest, KvmError> {
        Guest::build(config, None)
    }

    /// [`Guest::start`] on memory restored by `fill` (which writes the
    /// snapshot's bytes through vm-memory) before the vCPUs start: the
    /// loader then writes its page tables, code and parameter page over
    /// it (the workload, rate and seed are `config`'s; each vCPU's pacing
    /// deadline restarts, and the pause the snapshot was taken in is
    /// lifted), and those first pages are left marked in the VMM
    /// log, so the first harvest (a diff against the snapshot) holds them
    /// with whatever the guest writes after it starts.
    ///
    /// # Errors
    /// As [`Guest::start`], and what `fill` returns.
    pub fn restore(config: GuestConfig, fill: &mut Fill<'_>) -> Result<Guest, KvmError> {
        Guest::build(config, Some(fill))
    }

    fn build(config: GuestConfig, fill: Option<&mut Fill<'_>>) -> Result<Guest, KvmError> {
        config.check()?;
        let layout = Layout::new(config.mem_size).ok_or_else(|| KvmError::BadConfig {
            reason: format!("memory size {}", config.mem_size),
        })?;
        let size = usize::try_from(config.mem_size).map_err(|_| KvmError::Map {
            size: config.mem_size,
            reason: "larger than the address space".to_string(),
        })?;
        probe_map(config.mem_size, size)?;
        let kvm = Kvm::new().map_err(|e| KvmError::Unavailable {
            reason: format!("open /dev/kvm: {e}"),
        })?;
        let vm = kvm.create_vm().map_err(|e| KvmError::Unavailable {
            reason: format!("KVM_CREATE_VM: {e}"),
        })?;
        let memory =
            GuestMem::from_ranges(&[(GuestAddress(0), size)]).map_err(|e| KvmError::Map {
                size: config.mem_size,
                reason: e.to_string(),
            })?;
        let host = memory
            .get_host_address(GuestAddress(0))
            .map_err(|e| KvmError::Map {
                size: config.mem_size,
                reason: e.to_string(),
            })?;
        let region = memory.iter().next().ok_or_else(|| KvmError::Map {
            size: config.mem_size,
            reason: "no region".to_string(),
        })?;
        let vmm_log = vm_memory::MmapRegion::bitmap(region).shared();

        // Intel needs a TSS address below 4 GiB that no slot uses; AMD ignores it.
        if config.mem_size <= 0xfffb_d000 {
            vm.set_tss_address(0xfffb_d000)
                .map_err(|e| ioctl_err("KVM_SET_TSS_ADDR", e))?;
        }
        match config.dirty {
            DirtyMode::Log => {}
            DirtyMode::ClearLog => {
                if vm
                    .check_extension_raw(u64::from(kvm_bindings::KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2))
                    <= 0
                {
                    return Err(KvmError::MissingCapability {
                        name: "KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2",
                    });
                }
                let mut cap = kvm_enable_cap {
                    cap: kvm_bindings::KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
                    ..Default::default()
                };
                // Manual protect only: the log starts clear, not all-set.
                cap.args[0] = u64::from(kvm_bindings::KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE);
                vm.enable_cap(&cap)
                    .map_err(|e| ioctl_err("KVM_ENABLE_CAP(MANUAL_DIRTY_LOG_PROTECT2)", e))?;
            }
            DirtyMode::Ring { entries } => {
                let max = vm.check_extension_int(Cap::DirtyLogRing);
                if max <= 0 {
                    return Err(KvmError::MissingCapability {
                        name: "KVM_CAP_DIRTY_LOG_RING",
                    });
                }
                let bytes = u64::from(entries) * 16;
                if !entries.is_power_of_two() || bytes > max as u64 || bytes < PAGE {
                    return Err(KvmError::BadConfig {
                        reason: format!(
                            "ring of {entries} entries ({bytes} bytes): a power of two from 256 to {} entries",
                            max / 16
                        ),
                    });
                }
                let mut cap = kvm_enable_cap {
                    cap: kvm_bindings::KVM_CAP_DIRTY_LOG_RING,
                    ..Default::default()
                };
                cap.args[0] = bytes;
                vm.enable_cap(&cap)
                    .map_err(|e| ioctl_err("KVM_ENABLE_CAP(DIRTY_LOG_RING)", e))?;
            }
        }
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: KVM_MEM_LOG_DIRTY_PAGES,
            guest_phys_addr: 0,
            memory_size: config.mem_size,
            userspace_addr: host as u64,
        };
        // SAFETY: the region is the mapping `memory` owns, of exactly
        // `mem_size` bytes; `Guest` keeps `memory` alive until the VM fd is
        // closed (field order and `Drop`).
        unsafe { vm.set_user_memory_region(region) }
            .map_err(|e| ioctl_err("KVM_SET_USER_MEMORY_REGION", e))?;

        let restored = fill.is_some();
        if let Some(fill) = fill {
            fill(&memory)?;
        }
        load(&memory, &layout, &config)?;
        // The loader's writes went through vm-memory and marked the VMM log;
        // they are part of round 0, not of any later round.
        vmm_log.reset_range(0, config.mem_size)?;

        let mut vcpus = Vec::new();
        for i in 0..config.vcpus {
            let vcpu = vm
                .create_vcpu(u64::from(i))
                .map_err(|e| ioctl_err("KVM_CREATE_VCPU", e))?;
            setup_vcpu(&vcpu, &layout, i)?;
            vcpus.push(vcpu);
        }
        let tsc_khz = vcpus[0].get_tsc_khz().unwrap_or(0);
        let ring = match config.dirty {
            DirtyMode::Ring { entries } => Some(Arc::new(RingSet::map(&vcpus, entries)?)),
            _ => None,
        };
        if config.writes_per_sec > 0 {
            if tsc_khz == 0 {
                return Err(KvmError::BadConfig {
                    reason: "a paced workload needs KVM_GET_TSC_KHZ".to_string(),
                });
            }
            let hz = u128::from(tsc_khz) * 1000 * u128::from(config.vcpus);
            let ticks = (hz / u128::from(config.writes_per_sec)).max(1);
            memory
                .write_obj(
                    ticks as u64,
                    GuestAddress(layout.params + param::TICKS_PER_WRITE),
                )
                .map_err(|e| KvmError::Map {
                    size: config.mem_size,
                    reason: e.to_string(),
                })?;
            vmm_log.reset_range(0, config.mem_size)?;
        }

        if restored {
            let map = |e: vm_memory::GuestMemoryError| KvmError::Map {
                size: config.mem_size,
                reason: e.to_string(),
            };
            for i in 0..config.vcpus {
                memory
                    .write_obj(0u64, GuestAddress(layout.slot(i) + param::SLOT_DEADLINE))
                    .map_err(map)?;
            }
            // A snapshot is taken paused: its `cmd` says so. Run.
            memory
                .write_obj(0u32, GuestAddress(layout.params + param::CMD))
                .map_err(map)?;
            vmm_log.reset_range(0, config.mem_size)?;
            // Page tables, code and parameters: the loader's, not the
            // snapshot's.
            vmm_log.mark(0, layout.first_page * PAGE)?;
        }
        let vm = Arc::new(vm);
        let shared = Arc::new(Shared {
            state: Mutex::new(RunState::default()),
            cv: Condvar::new(),
            // SAFETY: `params + CMD` is inside the mapping (Layout keeps the
            // parameter page below `mem_size`) and 4-byte aligned.
            cmd: unsafe { host.add((layout.params + param::CMD) as usize) } as *const AtomicU32,
            vmm: Arc::clone(&vmm_log),
            cmd_gpa: layout.params + param::CMD,
            ring,
            throttle: Arc::new(Throttle::new(config.vcpus)),
        });
        // The guest exists before its vCPU threads: if a spawn fails, its
        // `Drop` stops and joins the threads already started before the
        // memory they run on is unmapped.
        let mut guest = Guest {
            config,
            layout,
            threads: Vec::new(),
            shared,
            vm,
            _kvm: kvm,
            memory,
            host,
            vmm_log,
            tsc_khz,
        };
        for (i, vcpu) in vcpus.into_iter().enumerate() {
            let shared = Arc::clone(&guest.shared);
            let vm = Arc::clone(&guest.vm);
            let handle = std::thread::Builder::new()
                .name(format!("vcpu{i}"))
                .spawn(move || {
                    let r = run_vcpu(vcpu, i as u32, &shared, &vm);
                    // Wake anyone waiting on the vCPUs: this one is gone.
                    let _st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                    shared.cv.notify_all();
                    r
                })
                .map_err(|e| KvmError::BadConfig {
                    reason: format!("cannot start a vCPU thread: {e}"),
                })?;
            guest.shared.throttle.add_thread(handle.as_pthread_t());
            guest.threads.push(handle);
        }
        Ok(guest)
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &GuestConfig {
        &self.config
    }

    /// Where everything sits in guest memory.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Guest memory (vm-memory), for host-side writes that must be logged.
    pub fn memory(&self) -> &GuestMem {
        &self.memory
    }

    /// The VMM's own dirty log (what host writes through
    /// [`Guest::memory`] mark).
    pub fn vmm_log(&self) -> &Arc<DirtyBitmap> {
        &self.vmm_log
    }

    pub(crate) fn vm(&self) -> &VmFd {
        &self.vm
    }

    pub(crate) fn ring(&self) -> Option<&Arc<RingSet>> {
        self.shared.ring.as_ref()
    }

    /// The TSC frequency KVM reports, in kHz (0 if it does not).
    pub fn tsc_khz(&self) -> u32 {
        self.tsc_khz
    }

    /// Writes done so far, over all vCPUs.
    pub fn writes(&self) -> u64 {
        (0..self.config.vcpus)
            .map(|i| {
                let off = self.layout.slot(i) + param::SLOT_WRITES;
                // SAFETY: the slot is inside the mapping and 8-byte aligned;
                // the guest writes it with plain 8-byte stores, which x86
                // makes atomic.
                unsafe { &*(self.host.add(off as usize) as *const AtomicU64) }
                    .load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Asks every vCPU to leave the guest and waits until all have: guest
    /// memory is then stable until [`Guest::resume`].
    pub fn pause(&self) {
        self.shared.set_cmd(1);
        // A throttled vCPU asleep outside the guest comes back now.
        self.shared.throttle.wake_all();
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.waiting < self.config.vcpus && !self.all_finished() {
            st = self
                .shared
                .cv
                .wait_timeout(st, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Lets paused vCPUs run again.
    pub fn resume(&self) {
        self.shared.set_cmd(0);
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.epoch += 1;
        st.waiting = 0;
        self.shared.cv.notify_all();
    }

    /// Throttles vCPU `vcpu` to run at most `100 - percent` percent of the
    /// time: once every [`throttle::PERIOD`](super::throttle::PERIOD) it is
    /// kicked out of the guest and kept out for `percent` of the period
    /// (clamped to [`throttle::MAX_PERCENT`](super::throttle::MAX_PERCENT));
    /// 0 lets it run freely. A VMM's auto-converge uses this when the guest
    /// dirties memory faster than the migration link sends it.
    ///
    /// # Errors
    /// [`KvmError::BadConfig`] for a vCPU the guest does not have, or when
    /// the kick signal's handler cannot be installed.
    pub fn set_throttle(&self, vcpu: u32, percent: u32) -> Result<(), KvmError> {
        if vcpu >= self.config.vcpus {
            return Err(KvmError::BadConfig {
                reason: format!("vCPU {vcpu} (the guest has {})", self.config.vcpus),
            });
        }
        if Throttle::set(&self.shared.throttle, vcpu, percent) {
            Ok(())
        } else {
            Err(KvmError::BadConfig {
                reason: "cannot install the vCPU kick signal's handler".to_string(),
            })
        }
    }

    /// Every vCPU's throttle, in percent (vCPU order).
    pub fn throttles(&self) -> Vec<u32> {
        self.shared.throttle.all()
    }

    /// Lets every vCPU run freely again.
    pub fn release_throttle(&self) {
        self.shared.throttle.release();
    }

    /// In ring mode, the pages each vCPU's ring reported since the last
    /// call (with repeats; vCPU order); `None` with a dirty log, which does
    /// not say which vCPU wrote a page.
    pub fn take_ring_counts(&self) -> Option<Vec<u64>> {
        self.shared.ring.as_ref().map(|r| r.take_counts())
    }

    /// Waits until every vCPU has made its `max_writes` writes (only
    /// meaningful with a quota) or `timeout` passes; returns whether they
    /// all did.
    pub fn wait_quota(&self, timeout: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.waiting < self.config.vcpus {
            let now = std::time::Instant::now();
            if now >= end || self.all_finished() {
                return false;
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    fn all_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// Stops the vCPUs and reports the first vCPU error, if any.
    ///
    /// # Errors
    /// What a vCPU thread failed with (an unexpected exit, a failed ioctl).
    pub fn stop(mut self) -> Result<(), KvmError> {
        self.stop_threads()
    }

    fn stop_threads(&mut self) -> Result<(), KvmError> {
        // The kicking thread first: it signals vCPU threads by id, which
        // must not have been joined.
        self.shared.throttle.halt();
        {
            let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.stop = true;
            self.shared.cv.notify_all();
        }
        self.shared.set_cmd(1);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t.join().unwrap_or_else(|_| {
                Err(KvmError::UnexpectedExit {
                    vcpu: u32::MAX,
                    exit: "vCPU thread panicked".to_string(),
                })
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.stop_threads();
    }
}

/// Whether the host can reserve `size` bytes of address space: vm-memory
/// would otherwise build the region's bitmap first and fail later, or not
/// at all, for a size no mapping can have.
fn probe_map(mem_size: u64, size: usize) -> Result<(), KvmError> {
    // SAFETY: a fresh inaccessible reservation, unmapped at once; no memory
    // is touched.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(KvmError::Map {
            size: mem_size,
            reason: std::io::Error::last_os_error().to_string(),
        });
    }
    // SAFETY: the reservation just made.
    unsafe { libc::munmap(p, size) };
    Ok(())
}

/// Page tables, code and parameters into guest memory.
fn load(memory: &GuestMem, layout: &Layout, config: &GuestConfig) -> Result<(), KvmError> {
    let err = |e: vm_memory::GuestMemoryError| KvmError::Map {
        size: config.mem_size,
        reason: e.to_string(),
    };
    for (gpa, entry) in layout.page_tables() {
        memory.write_obj(entry, GuestAddress(gpa)).map_err(err)?;
    }
    memory
        .write_slice(&GUEST_CODE, GuestAddress(layout.code))
        .map_err(err)?;
    let p = layout.params;
    let put = |off: u64, v: u64| memory.write_obj(v, GuestAddress(p + off)).map_err(err);
    memory
        .write_obj(config.workload.code(), GuestAddress(p + param::WORKLOAD))
        .map_err(err)?;
    put(param::FIRST_PAGE, layout.first_page)?;
    put(param::PAGES, layout.region_pages)?;
    if let Workload::Hot {
        hot_pages,
        hot_percent,
    } = config.workload
    {
        put(param::HOT_PAGES, hot_pages)?;
        let t = (u128::from(hot_percent) << 64) / 100;
        put(param::HOT_THRESHOLD, t.min(u128::from(u64::MAX)) as u64)?;
    }
    put(param::MAX_WRITES, config.max_writes)?;
    if config.fill_percent > 0 {
        let mut page = std::vec![0u8; PAGE as usize];
        let limit = u64::from(config.fill_percent);
        for p in layout.first_page..layout.first_page + layout.region_pages {
            let x = layout::xorshift64(p.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ config.seed | 1);
            if x % 100 < limit {
                for (i, c) in page.chunks_exact_mut(8).enumerate() {
                    c.copy_from_slice(&(x ^ i as u64 | 1).to_le_bytes());
                }
                memory
                    .write_slice(&page, GuestAddress(p * PAGE))
                    .map_err(err)?;
            }
        }
    }
    for i in 0..config.vcpus {
        let slot = layout.slot(i);
        memory
            .write_obj(
                layout::vcpu_seed(config.seed, i),
                GuestAddress(slot + param::SLOT_RNG),
            )
            .map_err(err)?;
    }
    Ok(())
}

/// 64-bit mode, flat segments, paging on with the loader's tables.
fn setup_vcpu(vcpu: &VcpuFd, layout: &Layout, i: u32) -> Result<(), KvmError> {
    let mut sregs = vcpu
        .get_sregs()
        .map_err(|e| ioctl_err("KVM_GET_SREGS", e))?;
    let mut code = sregs.cs;
    code.base = 0;
    code.limit = 0xffff_ffff;
    code.selector = 0x8;
    code.type_ = 0xb; // execute/read, accessed
    code.present = 1;
    code.dpl = 0;
    code.db = 0;
    code.s = 1;
    code.l = 1;
    code.g = 1;
    let mut data = code;
    data.selector = 0x10;
    data.type_ = 0x3; // read/write, accessed
    data.l = 0;
    data.db = 1;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.cr3 = layout.pml4;
    sregs.cr4 = 1 << 5; // PAE
    sregs.cr0 = (1 << 31) | (1 << 5) | (1 << 4) | 1; // PG, NE, ET, PE
    sregs.efer = (1 << 8) | (1 << 10); // LME, LMA
    vcpu.set_sregs(&sregs)
        .map_err(|e| ioctl_err("KVM_SET_SREGS", e))?;
    let slot = layout.slot(i);
    let regs = kvm_regs {
        rip: layout.code,
        rsi: layout.params,
        rdi: slot,
        rsp: slot + param::SLOT_BYTES,
        rflags: 2,
        ..Default::default()
    };
    vcpu.set_regs(&regs)
        .map_err(|e| ioctl_err("KVM_SET_REGS", e))
}

/// KVM_EXIT_DIRTY_RING_FULL, which kvm-ioctls reports as `Unsupported`.
const EXIT_DIRTY_RING_FULL: u32 = 31;
/// The guest's `out` ports: paused (cmd set) and quota reached.
const PORT_PAUSED: u16 = 0x10;
const PORT_QUOTA: u16 = 0x11;

fn run_vcpu(mut vcpu: VcpuFd, i: u32, shared: &Shared, vm: &VmFd) -> Result<(), KvmError> {
    // Since the last throttle sleep (see `throttle`).
    let mut ran_from = std::time::Instant::now();
    loop {
        // How far this vCPU's ring had been read when it entered the guest:
        // a full exit with nothing left to collect is an overflow only if
        // nobody (the harvest) read the ring since.
        let fetched_at_entry = shared.ring.as_ref().map(|r| r.fetched(i as usize));
        let exit = vcpu.run();
        match exit {
            Ok(VcpuExit::IoOut(port, _)) if port == PORT_PAUSED || port == PORT_QUOTA => {
                let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.stop {
                    return Ok(());
                }
                let epoch = st.epoch;
                st.waiting += 1;
                shared.cv.notify_all();
                while st.epoch == epoch && !st.stop {
                    st = shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                if st.stop {
                    return Ok(());
                }
            }
            Ok(VcpuExit::Unsupported(EXIT_DIRTY_RING_FULL)) => {
                // The ring is (softly) full: collect it into the pending list
                // and reset it, then go back in.
                if let Some(ring) = &shared.ring {
                    // An overflow here stops this vCPU; the harvest reports
                    // it. Collecting nothing because the harvest just
                    // emptied the ring is not one (RingSet::full_exit).
                    ring.full_exit(vm, i as usize, fetched_at_entry.unwrap_or(0))?;
                } else {
                    return Err(KvmError::UnexpectedExit {
                        vcpu: i,
                        exit: "dirty ring full without a ring".to_string(),
                    });
                }
            }
            Ok(VcpuExit::Intr) => throttled(shared, i, &mut ran_from),
            // The idle workload halts (no interrupt will wake it: the host
            // resumes it after a moment, so a pause is seen within 1 ms).
            Ok(VcpuExit::Hlt) => std::thread::sleep(std::time::Duration::from_millis(1)),
            Ok(other) => {
                return Err(KvmError::UnexpectedExit {
                    vcpu: i,
                    exit: format!("{other:?}"),
                })
            }
            Err(e) if e.errno() == libc::EINTR => throttled(shared, i, &mut ran_from),
            Err(e) if e.errno() == libc::EAGAIN => {}
            Err(e) => return Err(ioctl_err("KVM_RUN", e)),
        }
    }
}

/// A vCPU kicked out of the guest after running since `*ran_from`: stays
/// out for its throttle's share (nothing when it is not throttled).
fn throttled(shared: &Shared, i: u32, ran_from: &mut std::time::Instant) {
    shared.throttle.nap(i, ran_from.elapsed());
    *ran_from = std::time::Instant::now();
}
