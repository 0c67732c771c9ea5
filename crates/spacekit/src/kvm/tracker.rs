//! Harvesting a guest's dirty pages: KVM's log (plain or cleared by hand),
//! KVM's dirty rings, and the VMM's own log; and the round's table.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use std::vec::Vec;

use kvm_bindings::{
    kvm_clear_dirty_log, kvm_clear_dirty_log__bindgen_ty_1, kvm_dirty_gfn, kvm_dirty_log,
    kvm_dirty_log__bindgen_ty_1, KVMIO, KVM_DIRTY_LOG_PAGE_OFFSET,
};
use kvm_ioctls::{VcpuFd, VmFd};
use std::os::fd::AsRawFd;
use vmm_sys_util::ioctl::{ioctl, ioctl_with_ref};
use vmm_sys_util::{ioctl_io_nr, ioctl_iow_nr, ioctl_iowr_nr};

use super::guest::Guest;
use super::layout::PAGE;
use super::{DirtyMode, KvmError};
use crate::dirty::{ranges_from_pages, scatter_pages, Geometry, MemoryRangeTable, Scan};

// kvm-ioctls wraps KVM_GET_DIRTY_LOG only as a call that allocates a new
// Vec each time, and wraps neither of the other two; these are the kernel's
// numbers, built the way kvm-ioctls builds its own.
ioctl_iow_nr!(KVM_GET_DIRTY_LOG, KVMIO, 0x42, kvm_dirty_log);
ioctl_iowr_nr!(KVM_CLEAR_DIRTY_LOG, KVMIO, 0xc0, kvm_clear_dirty_log);
ioctl_io_nr!(KVM_RESET_DIRTY_RINGS, KVMIO, 0xc7);

/// A ring entry's flags (the kernel's `KVM_DIRTY_GFN_F_*`).
const GFN_DIRTY: u32 = 1;
const GFN_RESET: u32 = 2;

struct Ring {
    base: *mut kvm_dirty_gfn,
    entries: u32,
}

struct RingInner {
    /// Next entry to read, per ring.
    fetch: Vec<u32>,
    /// Pages collected (by a vCPU whose ring filled, or a harvest) and not
    /// yet handed to a harvest.
    pending: Vec<u64>,
    /// A ring was found completely full: entries may have been overwritten,
    /// so the pages they named are unknown.
    overflowed: bool,
}

/// The vCPUs' dirty rings, mapped from their fds.
pub(crate) struct RingSet {
    rings: Vec<Ring>,
    inner: Mutex<RingInner>,
}

// SAFETY: the rings are shared mappings of the vCPU fds, valid until `Drop`
// unmaps them; entries are read and their flags written only under `inner`'s
// lock, with atomic accesses to the flags the kernel also touches.
unsafe impl Send for RingSet {}
// SAFETY: as above.
unsafe impl Sync for RingSet {}

impl RingSet {
    pub(crate) fn map(vcpus: &[VcpuFd], entries: u32) -> Result<RingSet, KvmError> {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
        let bytes = entries as usize * core::mem::size_of::<kvm_dirty_gfn>();
        let mut rings = Vec::new();
        for vcpu in vcpus {
            // SAFETY: a fresh shared mapping of the vCPU's ring, at the
            // offset KVM documents; the result is checked before use.
            let p = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    vcpu.as_raw_fd(),
                    i64::from(KVM_DIRTY_LOG_PAGE_OFFSET) * page,
                )
            };
            if p == libc::MAP_FAILED {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                for r in &rings {
                    unmap(r);
                }
                return Err(KvmError::Ioctl {
                    what: "mmap of the dirty ring",
                    errno,
                });
            }
            rings.push(Ring {
                base: p.cast(),
                entries,
            });
        }
        Ok(RingSet {
            inner: Mutex::new(RingInner {
                fetch: std::vec![0; rings.len()],
                pending: Vec::new(),
                overflowed: false,
            }),
            rings,
        })
    }

    /// Moves every published entry of every ring into the pending list,
    /// marks them for reset and resets the rings (which write-protects those
    /// pages again). Called by a harvest and by a vCPU whose ring is full.
    pub(crate) fn collect(&self, vm: &VmFd) -> Result<usize, KvmError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        let mut taken = 0;
        for (ring, fetch) in self.rings.iter().zip(inner.fetch.iter_mut()) {
            let mut this = 0u32;
            loop {
                let idx = (*fetch & (ring.entries - 1)) as usize;
                // SAFETY: idx < entries, inside the mapping.
                let e = unsafe { ring.base.add(idx) };
                // SAFETY: `flags` is the entry's first u32, 4-byte aligned;
                // the kernel publishes an entry by setting DIRTY after
                // writing slot and offset (acquire pairs with its release).
                let flags = unsafe { &*(core::ptr::addr_of_mut!((*e).flags) as *const AtomicU32) };
                if flags.load(Ordering::Acquire) & GFN_DIRTY == 0 {
                    break;
                }
                // SAFETY: a published entry; the kernel does not write it
                // again until it is reset.
                let (slot, offset) = unsafe { ((*e).slot, (*e).offset) };
                if slot == 0 {
                    inner.pending.push(offset);
                }
                flags.store(GFN_RESET, Ordering::Release);
                *fetch = fetch.wrapping_add(1);
                taken += 1;
                this += 1;
            }
            // KVM stops a vCPU a few dozen entries short of the end (its
            // soft limit); a ring found full to the last entry has been
            // pushed past it.
            if this >= ring.entries {
                inner.overflowed = true;
            }
        }
        if taken > 0 {
            // SAFETY: KVM_RESET_DIRTY_RINGS takes no argument.
            let r = unsafe { ioctl(vm, KVM_RESET_DIRTY_RINGS()) };
            if r < 0 {
                return Err(KvmError::Ioctl {
                    what: "KVM_RESET_DIRTY_RINGS",
                    errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                });
            }
        }
        Ok(taken)
    }

    pub(crate) fn mark_overflowed(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .overflowed = true;
    }

    /// Collects, then hands every pending page to `out` (cleared first).
    ///
    /// # Errors
    /// [`KvmError::RingOverflow`] once a ring has overflowed: the pages of
    /// the overwritten entries are lost, so no table built from the rings
    /// can be trusted.
    fn drain_into(&self, vm: &VmFd, out: &mut Vec<u64>) -> Result<(), KvmError> {
        self.collect(vm)?;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.overflowed {
            return Err(KvmError::RingOverflow);
        }
        out.clear();
        core::mem::swap(out, &mut inner.pending);
        Ok(())
    }
}

fn unmap(r: &Ring) {
    let bytes = r.entries as usize * core::mem::size_of::<kvm_dirty_gfn>();
    // SAFETY: the mapping `map` made, unmapped once.
    unsafe { libc::munmap(r.base.cast(), bytes) };
}

impl Drop for RingSet {
    fn drop(&mut self) {
        for r in &self.rings {
            unmap(r);
        }
    }
}

/// One harvest's counts and time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Harvest {
    /// Pages KVM reported (the log's set bits, or ring entries including
    /// repeats).
    pub kvm_pages: u64,
    /// Pages the VMM's own log had.
    pub vmm_pages: u64,
    /// Time to harvest (ioctls, ring walk, the VMM log's swap).
    pub time: Duration,
}

/// The reused buffers of a guest's dirty tracking: harvest each round's logs
/// and build the round's table.
pub struct DirtyTracker {
    mode: DirtyMode,
    geometry: Geometry,
    pages: u64,
    kvm: Vec<u64>,
    vmm: Vec<u64>,
    ring_pages: Vec<u64>,
    /// Whether `ring_pages` holds this round's pages and the VMM log is clean
    /// (the ring fast path applies).
    ring_only: bool,
}

impl DirtyTracker {
    /// Buffers for `guest`'s memory.
    pub fn new(guest: &Guest) -> DirtyTracker {
        let pages = guest.layout().pages();
        let words = pages.div_ceil(64) as usize;
        DirtyTracker {
            mode: guest.config().dirty,
            geometry: Geometry::new(0, PAGE).expect("4096 is a power of two"),
            pages,
            kvm: std::vec![0; words],
            vmm: std::vec![0; words],
            ring_pages: Vec::new(),
            ring_only: false,
        }
    }

    /// Harvests KVM's log (or rings) and the VMM's log into the tracker's
    /// buffers, re-arming write protection for the harvested pages.
    ///
    /// # Errors
    /// [`KvmError::Ioctl`] when KVM refuses a call.
    pub fn harvest(&mut self, guest: &Guest) -> Result<Harvest, KvmError> {
        let t = Instant::now();
        let kvm_pages = match self.mode {
            DirtyMode::Log => {
                self.get_log(guest.vm())?;
                count(&self.kvm)
            }
            DirtyMode::ClearLog => {
                self.get_log(guest.vm())?;
                self.clear_log(guest.vm())?;
                count(&self.kvm)
            }
            DirtyMode::Ring { .. } => {
                let ring = guest.ring().expect("ring mode has rings");
                ring.drain_into(guest.vm(), &mut self.ring_pages)?;
                self.kvm.fill(0);
                scatter_pages(&self.ring_pages, self.pages, &mut self.kvm)?;
                self.ring_pages.len() as u64
            }
        };
        guest.vmm_log().harvest_into(&mut self.vmm)?;
        let vmm_pages = count(&self.vmm);
        self.ring_only = matches!(self.mode, DirtyMode::Ring { .. }) && vmm_pages == 0;
        Ok(Harvest {
            kvm_pages,
            vmm_pages,
            time: t.elapsed(),
        })
    }

    /// Discards whatever the logs hold (before round 0, which sends all of
    /// memory anyway).
    ///
    /// # Errors
    /// As [`DirtyTracker::harvest`].
    pub fn reset(&mut self, guest: &Guest) -> Result<(), KvmError> {
        self.harvest(guest).map(|_| ())
    }

    /// The KVM side of the last harvest, one bit per page (for a ring, the
    /// ring's pages scattered into a bitmap).
    pub fn kvm_log(&self) -> &[u64] {
        &self.kvm
    }

    /// The VMM side of the last harvest.
    pub fn vmm_log(&self) -> &[u64] {
        &self.vmm
    }

    /// The last harvest's table of dirty ranges (the OR of both logs),
    /// written into `table` (cleared first). With a ring and a clean VMM
    /// log, it is built from the ring's pages directly (sorted, not scanned).
    ///
    /// # Errors
    /// [`KvmError::Dirty`] if a ring entry lies outside the slot.
    pub fn build(&mut self, table: &mut MemoryRangeTable) -> Result<(), KvmError> {
        table.clear();
        if self.ring_only {
            ranges_from_pages(&mut self.ring_pages, self.pages, self.geometry, table)?;
        } else {
            table.extend_from(Scan::new(&self.kvm, self.geometry)?.or(&self.vmm)?);
        }
        Ok(())
    }

    fn get_log(&mut self, vm: &VmFd) -> Result<(), KvmError> {
        let log = kvm_dirty_log {
            slot: 0,
            padding1: 0,
            __bindgen_anon_1: kvm_dirty_log__bindgen_ty_1 {
                dirty_bitmap: self.kvm.as_mut_ptr().cast(),
            },
        };
        // SAFETY: the buffer holds one bit per page of slot 0
        // (pages.div_ceil(64) words), as KVM writes.
        let r = unsafe { ioctl_with_ref(vm, KVM_GET_DIRTY_LOG(), &log) };
        if r < 0 {
            return Err(KvmError::Ioctl {
                what: "KVM_GET_DIRTY_LOG",
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            });
        }
        Ok(())
    }

    /// `KVM_CLEAR_DIRTY_LOG` of exactly the harvested pages: the span from
    /// the first to the last dirty word, with the harvested bits as the mask.
    fn clear_log(&mut self, vm: &VmFd) -> Result<(), KvmError> {
        let Some(w0) = self.kvm.iter().position(|&w| w != 0) else {
            return Ok(());
        };
        let w1 = self.kvm.iter().rposition(|&w| w != 0).unwrap_or(w0);
        // KVM takes at most 2^32 - 64 pages per call: clear in chunks.
        const CHUNK_WORDS: usize = 1 << 25;
        let mut w = w0;
        while w <= w1 {
            let end = (w + CHUNK_WORDS).min(w1 + 1);
            let first_page = w as u64 * 64;
            let num_pages = ((end - w) as u64 * 64).min(self.pages - first_page);
            let clear = kvm_clear_dirty_log {
                slot: 0,
                num_pages: num_pages as u32,
                first_page,
                __bindgen_anon_1: kvm_clear_dirty_log__bindgen_ty_1 {
                    dirty_bitmap: self.kvm[w..].as_mut_ptr().cast(),
                },
            };
            // SAFETY: the mask covers `num_pages` bits from word `w`, inside
            // the buffer; KVM only reads it.
            let r = unsafe { ioctl_with_ref(vm, KVM_CLEAR_DIRTY_LOG(), &clear) };
            if r < 0 {
                return Err(KvmError::Ioctl {
                    what: "KVM_CLEAR_DIRTY_LOG",
                    errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
                });
            }
            w = end;
        }
        Ok(())
    }
}

fn count(words: &[u64]) -> u64 {
    use crate::bitmap::{BitView, Bits};
    BitView::new(words, words.len() * 64).map_or(0, |v| v.count_ones() as u64)
}
