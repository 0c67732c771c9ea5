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
