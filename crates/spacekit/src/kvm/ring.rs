//! The vCPUs' dirty rings (`KVM_CAP_DIRTY_LOG_RING`), mapped from their fds.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::vec::Vec;

use kvm_bindings::{kvm_dirty_gfn, KVMIO, KVM_DIRTY_LOG_PAGE_OFFSET};
use kvm_ioctls::{VcpuFd, VmFd};
use std::os::fd::AsRawFd;
use vmm_sys_util::ioctl::ioctl;
use vmm_sys_util::ioctl_io_nr;

use super::error::KvmError;

// Not wrapped by kvm-ioctls: the kernel's number, built as kvm-ioctls builds
// its own.
ioctl_io_nr!(KVM_RESET_DIRTY_RINGS, KVMIO, 0xc7);

/// A ring entry's flags (the kernel's `KVM_DIRTY_GFN_F_*`).
const GFN_DIRTY: u32 = 1;
const GFN_RESET: u32 = 2;

struct Ring {
    base: *mut kvm_dirty_gfn,
    entries: u32,
    /// Whether `base` is an mmap of a vCPU fd (unmapped on drop); the unit
    /// tests use plain memory instead.
    mapped: bool,
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
    /// Entries collected per ring since the last `take_counts`.
    counts: Vec<u64>,
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
                mapped: true,
            });
        }
        Ok(RingSet {
            inner: Mutex::new(RingInner {
                fetch: std::vec![0; rings.len()],
                counts: std::vec![0; rings.len()],
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
        self.collect_with(&|| reset_rings(vm))
    }

    /// [`RingSet::collect`] with the reset ioctl as `reset`.
    fn collect_with(&self, reset: &dyn Fn() -> Result<(), KvmError>) -> Result<usize, KvmError> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let inner = &mut *inner;
        let mut taken = 0;
        for ((ring, fetch), count) in self
            .rings
            .iter()
            .zip(inner.fetch.iter_mut())
            .zip(inner.counts.iter_mut())
        {
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
                *count += 1;
            }
            // KVM stops a vCPU a few dozen entries short of the end (its
            // soft limit); a ring found full to the last entry has been
            // pushed past it.
            if this >= ring.entries {
                inner.overflowed = true;
            }
        }
        if taken > 0 {
            reset()?;
        }
        Ok(taken)
    }

    /// Entries read from ring `ring` so far (its fetch index). A vCPU
    /// notes it before it enters the guest, for [`RingSet::full_exit`].
    pub(crate) fn fetched(&self, ring: usize) -> u32 {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.fetch.get(ring).copied().unwrap_or(0)
    }

    /// A vCPU's `KVM_EXIT_DIRTY_RING_FULL` on ring `ring`, which held
    /// `fetched_at_entry` fetched entries when the vCPU entered the guest:
    /// collects (and resets) the rings so it can go back in.
    ///
    /// Collecting nothing is not by itself an overflow: the harvest may
    /// have emptied this ring between the exit and this call (that is
    /// exactly what it is for). Only a ring that is full yet has no entry to
    /// collect and that nobody collected from since the vCPU entered is one
    /// whose indices can no longer reach a reset; a ring pushed past its end
    /// is found full to the last entry by [`RingSet::collect`].
    ///
    /// # Errors
    /// [`KvmError::RingOverflow`] in the first case (the vCPU cannot run
    /// again); the reset's error.
    pub(crate) fn full_exit(
        &self,
        vm: &VmFd,
        ring: usize,
        fetched_at_entry: u32,
    ) -> Result<(), KvmError> {
        self.full_exit_with(&|| reset_rings(vm), ring, fetched_at_entry)
    }

    fn full_exit_with(
        &self,
        reset: &dyn Fn() -> Result<(), KvmError>,
        ring: usize,
        fetched_at_entry: u32,
    ) -> Result<(), KvmError> {
        if self.collect_with(reset)? > 0 || self.fetched(ring) != fetched_at_entry {
            return Ok(());
        }
        self.mark_overflowed();
        Err(KvmError::RingOverflow)
    }

    pub(crate) fn mark_overflowed(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .overflowed = true;
    }

    /// Entries each ring gave since the last call (ring = vCPU order), and
    /// zeroes the counts.
    pub(crate) fn take_counts(&self) -> Vec<u64> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let n = inner.counts.len();
        core::mem::replace(&mut inner.counts, std::vec![0; n])
    }

    /// Collects, then hands every pending page to `out` (cleared first).
    ///
    /// # Errors
    /// [`KvmError::RingOverflow`] once a ring has overflowed: the pages of
    /// the overwritten entries are lost, so no table built from the rings
    /// can be trusted.
    pub(crate) fn drain_into(&self, vm: &VmFd, out: &mut Vec<u64>) -> Result<(), KvmError> {
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

/// `KVM_RESET_DIRTY_RINGS` on `vm`.
fn reset_rings(vm: &VmFd) -> Result<(), KvmError> {
    // SAFETY: KVM_RESET_DIRTY_RINGS takes no argument.
    let r = unsafe { ioctl(vm, KVM_RESET_DIRTY_RINGS()) };
    if r < 0 {
        return Err(KvmError::Ioctl {
            what: "KVM_RESET_DIRTY_RINGS",
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        });
    }
    Ok(())
}

fn unmap(r: &Ring) {
    if !r.mapped {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring set over plain memory: `entries` zeroed entries per ring.
    fn fake(rings: usize, entries: u32) -> (RingSet, Vec<Vec<kvm_dirty_gfn>>) {
        let mut mem: Vec<Vec<kvm_dirty_gfn>> = (0..rings)
            .map(|_| std::vec![kvm_dirty_gfn::default(); entries as usize])
            .collect();
        let set = RingSet {
            rings: mem
                .iter_mut()
                .map(|m| Ring {
                    base: m.as_mut_ptr(),
                    entries,
                    mapped: false,
                })
                .collect(),
            inner: Mutex::new(RingInner {
                fetch: std::vec![0; rings],
                counts: std::vec![0; rings],
                pending: Vec::new(),
                overflowed: false,
            }),
        };
        (set, mem)
    }

    /// What KVM does: publishes an entry for page `offset` at `index`.
    fn push(mem: &mut [kvm_dirty_gfn], index: usize, offset: u64) {
        mem[index].slot = 0;
        mem[index].offset = offset;
        mem[index].flags = GFN_DIRTY;
    }

    fn ok() -> Result<(), KvmError> {
        Ok(())
    }

    /// A vCPU exits because its ring is (softly) full, but the harvest
    /// empties that ring before the vCPU collects: collecting nothing then
    /// is that race, not an overflow, and no page is lost.
    #[test]
    fn a_ring_the_harvest_emptied_is_not_an_overflow() {
        let (set, mut mem) = fake(2, 8);
        let at_entry = set.fetched(0);
        for i in 0..6 {
            push(&mut mem[0], i, 100 + i as u64);
        }
        // The harvest runs first and takes all six.
        assert_eq!(set.collect_with(&ok).unwrap(), 6);
        // Then the vCPU handles its full exit.
        set.full_exit_with(&ok, 0, at_entry)
            .expect("an emptied ring is not an overflow");
        let mut pages = Vec::new();
        set.collect_with(&ok).unwrap();
        {
            let mut inner = set.inner.lock().unwrap();
            assert!(!inner.overflowed);
            core::mem::swap(&mut pages, &mut inner.pending);
        }
        assert_eq!(pages, [100, 101, 102, 103, 104, 105]);
    }

    /// A full exit with entries to collect is the normal case.
    #[test]
    fn a_full_exit_collects() {
        let (set, mut mem) = fake(1, 8);
        let at_entry = set.fetched(0);
        for i in 0..6 {
            push(&mut mem[0], i, i as u64);
        }
        set.full_exit_with(&ok, 0, at_entry).unwrap();
        assert_eq!(set.fetched(0), 6);
        assert!(!set.inner.lock().unwrap().overflowed);
    }

    /// Each ring's entries are counted for its vCPU, and taking the counts
    /// zeroes them.
    #[test]
    fn counts_are_per_ring() {
        let (set, mut mem) = fake(2, 16);
        for i in 0..5 {
            push(&mut mem[0], i, i as u64);
        }
        for i in 0..2 {
            push(&mut mem[1], i, 100 + i as u64);
        }
        set.collect_with(&ok).unwrap();
        assert_eq!(set.take_counts(), std::vec![5, 2]);
        assert_eq!(set.take_counts(), std::vec![0, 0]);
    }

    /// Full, nothing to collect, and nobody collected since the vCPU
    /// entered: the indices cannot reach a reset; and a ring found full to
    /// its last entry was pushed past its end. Both are overflows.
    #[test]
    fn real_overflows_are_reported() {
        let (set, _mem) = fake(1, 8);
        let at_entry = set.fetched(0);
        assert!(matches!(
            set.full_exit_with(&ok, 0, at_entry),
            Err(KvmError::RingOverflow)
        ));
        let (set, mut mem) = fake(1, 8);
        for i in 0..8 {
            push(&mut mem[0], i, i as u64);
        }
        assert_eq!(set.collect_with(&ok).unwrap(), 8);
        assert!(set.inner.lock().unwrap().overflowed);
    }
}
