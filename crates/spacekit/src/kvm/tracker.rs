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

#[cfg(test)]
mod tests {
    //! `harvest_build` on a real guest, in every mode: the table, counts and
    //! logs that `harvest` then `build` give.
    use super::*;
    use crate::kvm::{layout, GuestConfig};
    use std::collections::BTreeSet;
    use std::time::Duration;
    use vm_memory::{Bytes, GuestAddress};

    fn pages_of(words: &[u64]) -> BTreeSet<u64> {
        let mut out = BTreeSet::new();
        for (i, &w) in words.iter().enumerate() {
            for b in 0..64 {
                if w >> b & 1 == 1 {
                    out.insert(i as u64 * 64 + b);
                }
            }
        }
        out
    }

    fn table_pages(t: &MemoryRangeTable) -> BTreeSet<u64> {
        t.ranges()
            .iter()
            .flat_map(|r| r.gpa / PAGE..r.end() / PAGE)
            .collect()
    }

    /// Host writes (the VMM log) of one page each.
    fn host_writes(guest: &Guest, pages: &[u64]) -> BTreeSet<u64> {
        for &p in pages {
            guest
                .memory()
                .write_obj(0x5eed_u32, GuestAddress(p * PAGE))
                .unwrap();
        }
        pages.iter().copied().collect()
    }

    #[test]
    fn harvest_build_equals_harvest_then_build_in_every_mode() {
        if let Err(e) = crate::kvm::available() {
            std::println!("harvest_build_equals_harvest_then_build_in_every_mode: skipped: {e}");
            return;
        }
        for mode in [
            DirtyMode::Log,
            DirtyMode::ClearLog,
            DirtyMode::Ring { entries: 65536 },
        ] {
            let (writes, seed) = (3000, 0x5eed);
            let guest = Guest::start(GuestConfig {
                mem_size: 64 << 20,
                max_writes: writes,
                seed,
                dirty: mode,
                ..GuestConfig::default()
            })
            .unwrap();
            assert!(guest.wait_quota(Duration::from_secs(20)));
            let first = guest.layout().first_page;
            let vmm = host_writes(&guest, &[first, first + 1, first + 700, first + 9000]);
            let mut kvm = layout::uniform_pages(guest.layout(), seed, writes);
            kvm.insert(guest.layout().params_page());
            let mut tracker = DirtyTracker::new(&guest);
            let mut table = MemoryRangeTable::new();
            table.push(crate::dirty::MemoryRange { gpa: 0, length: 1 });
            let h = tracker.harvest_build(&guest, &mut table).unwrap();
            assert_eq!(pages_of(tracker.kvm_log()), kvm, "{mode:?}: kvm log");
            assert_eq!(pages_of(tracker.vmm_log()), vmm, "{mode:?}: vmm log");
            let all: BTreeSet<u64> = kvm.union(&vmm).copied().collect();
            assert_eq!(table_pages(&table), all, "{mode:?}: table");
            assert_eq!(h.vmm_pages, vmm.len() as u64, "{mode:?}");
            assert!(h.kvm_pages >= kvm.len() as u64, "{mode:?}");
            let mut again = MemoryRangeTable::new();
            tracker.build(&mut again).unwrap();
            assert_eq!(again, table, "{mode:?}: build after harvest_build");
            // A dense harvest, then a one-pass one: the VMM side shows only
            // the last round's pages (no stale words of either).
            host_writes(&guest, &[first + 3, first + 64 * 5]);
            tracker.harvest(&guest).unwrap();
            let vmm = host_writes(&guest, &[first + 4, first + 64 * 9 + 63]);
            tracker.harvest_build(&guest, &mut table).unwrap();
            assert_eq!(pages_of(tracker.vmm_log()), vmm, "{mode:?}: after harvest");
            let vmm = host_writes(&guest, &[first + 2]);
            let h = tracker.harvest_build(&guest, &mut table).unwrap();
            assert_eq!(pages_of(tracker.vmm_log()), vmm, "{mode:?}: sparse copy");
            assert_eq!(table_pages(&table), vmm, "{mode:?}: idle guest's table");
            assert_eq!((h.kvm_pages, h.vmm_pages), (0, 1), "{mode:?}");
            guest.stop().unwrap();
        }
    }
}
