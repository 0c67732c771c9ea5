//! Harvesting a guest's dirty pages: KVM's log (plain or cleared by hand),
//! KVM's dirty rings, and the VMM's own log; and the round's table.

use std::time::{Duration, Instant};
use std::vec::Vec;

use kvm_bindings::{
    kvm_clear_dirty_log, kvm_clear_dirty_log__bindgen_ty_1, kvm_dirty_log,
    kvm_dirty_log__bindgen_ty_1, KVMIO,
};
use kvm_ioctls::VmFd;
use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::{ioctl_iow_nr, ioctl_iowr_nr};

use super::error::KvmError;
use super::guest::{DirtyMode, Guest};
use super::layout::PAGE;
use crate::dirty::{ranges_from_pages, scatter_pages, Geometry, MemoryRangeTable, Scan};

// kvm-ioctls wraps KVM_GET_DIRTY_LOG only as a call that allocates a new
// Vec each time, and does not wrap KVM_CLEAR_DIRTY_LOG; these are the
// kernel's numbers, built the way kvm-ioctls builds its own.
ioctl_iow_nr!(KVM_GET_DIRTY_LOG, KVMIO, 0x42, kvm_dirty_log);
ioctl_iowr_nr!(KVM_CLEAR_DIRTY_LOG, KVMIO, 0xc0, kvm_clear_dirty_log);

/// One harvest's counts and time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Harvest {
    /// Pages KVM reported (the log's set bits, or ring entries including
    /// repeats).
    pub kvm_pages: u64,
    /// Pages the VMM's own log had.
    pub vmm_pages: u64,
    /// Time to harvest (ioctls, ring walk, the VMM log's swap); from
    /// [`DirtyTracker::harvest_build`], the harvest and the table together.
    pub time: Duration,
}

/// The reused buffers of a guest's dirty tracking: harvest each round's logs
/// and build the round's table.
pub struct DirtyTracker {
    mode: DirtyMode,
    geometry: Geometry,
    pages: u64,
    kvm: Vec<u64>,
    /// The VMM side of the last harvest, dense (what `vmm_log` shows).
    vmm: Vec<u64>,
    /// The words of `vmm` the last one-pass harvest wrote, as `(index,
    /// word)`: the only nonzero words of `vmm` when `vmm_sparse`.
    taken: Vec<(usize, u64)>,
    /// Whether `vmm` is nonzero only at the words in `taken` (after
    /// `harvest_build`); after `harvest` any word may be.
    vmm_sparse: bool,
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
            taken: Vec::new(),
            vmm_sparse: false,
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
        self.vmm_sparse = false;
        let vmm_pages = count(&self.vmm);
        self.ring_only = matches!(self.mode, DirtyMode::Ring { .. }) && vmm_pages == 0;
        Ok(Harvest {
            kvm_pages,
            vmm_pages,
            time: t.elapsed(),
        })
    }

    /// Harvests the round's logs and builds its table (the OR of both logs,
    /// written into `table`, cleared first): [`DirtyTracker::harvest`] then
    /// [`DirtyTracker::build`], with the same table, counts and logs
    /// afterwards, but for KVM's log (log and clear modes) the VMM's log is
    /// harvested, ORed with KVM's and turned into ranges in one pass over
    /// the words ([`DirtyBitmap::harvest_or_into_table`]), after KVM's
    /// ioctl (`KVM_GET_DIRTY_LOG`, and `KVM_CLEAR_DIRTY_LOG` in clear
    /// mode). With rings it is `harvest` then `build` (the ring's own fast
    /// path: its pages sorted into ranges when the VMM log is clean).
    ///
    /// [`DirtyTracker::kvm_log`] and [`DirtyTracker::vmm_log`] still show
    /// the round's logs afterwards. The VMM side is kept at a cost of
    /// O(dirty VMM words), not a pass: the pass records each word it takes
    /// (`(index, word)`), and the tracker's dense copy is patched from that
    /// list, zeroing the previous round's words and writing this round's.
    /// [`Harvest::time`] covers the whole call.
    ///
    /// [`DirtyBitmap::harvest_or_into_table`]: crate::dirty::DirtyBitmap::harvest_or_into_table
    ///
    /// # Errors
    /// [`KvmError::Ioctl`] when KVM refuses a call; [`KvmError::Dirty`] if a
    /// ring entry lies outside the slot.
    pub fn harvest_build(
        &mut self,
        guest: &Guest,
        table: &mut MemoryRangeTable,
    ) -> Result<Harvest, KvmError> {
        let t = Instant::now();
        match self.mode {
            DirtyMode::Log => self.get_log(guest.vm())?,
            DirtyMode::ClearLog => {
                self.get_log(guest.vm())?;
                self.clear_log(guest.vm())?;
            }
            DirtyMode::Ring { .. } => {
                let h = self.harvest(guest)?;
                self.build(table)?;
                return Ok(Harvest {
                    time: t.elapsed(),
                    ..h
                });
            }
        }
        table.clear();
        // The dense copy's words from the last round go back to zero
        // before `taken` is refilled (all of it after a plain `harvest`).
        if self.vmm_sparse {
            for &(i, _) in &self.taken {
                self.vmm[i] = 0;
            }
        } else {
            self.vmm.fill(0);
        }
        let counts = guest.vmm_log().harvest_or_into_table(
            &self.kvm,
            self.geometry,
            table,
            Some(&mut self.taken),
        )?;
        for &(i, w) in &self.taken {
            self.vmm[i] = w;
        }
        self.vmm_sparse = true;
        self.ring_only = false;
        Ok(Harvest {
            kvm_pages: counts.other_pages,
            vmm_pages: counts.pages,
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
