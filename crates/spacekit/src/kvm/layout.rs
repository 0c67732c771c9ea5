//! Where everything sits in the guest's memory, the guest's code, and a model
//! of the pages it writes.
//!
//! ```text
//! 0x0000           unused
//! 0x1000           PML4 (one entry)
//! 0x2000           PDPT (one entry per GiB)
//! 0x3000 ..        one page directory per GiB: 512 2 MiB pages, A and D preset
//! code page        GUEST_CODE (guest.S)
//! parameter page   the host's parameters (offset 0..64) and one 64-byte slot
//!                  per vCPU (slot i at 64 * (i + 1)), which is also its stack
//! region           every page after the parameter page: what the workload dirties
//! ```
//!
//! The page tables' accessed and dirty bits are preset, so a page walk never
//! writes to them: the guest dirties only its region and its parameter page.

/// The guest's code, assembled from `guest.S` (64-bit, position-independent).
pub(crate) const GUEST_CODE: [u8; 234] = [
    0x8b, 0x06, 0x85, 0xc0, 0x0f, 0x85, 0xab, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x4e, 0x30, 0x48, 0x85,
    0xc9, 0x74, 0x09, 0x48, 0x39, 0x0f, 0x0f, 0x83, 0xa0, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x4e, 0x28,
    0x48, 0x85, 0xc9, 0x74, 0x21, 0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0x48, 0x8b,
    0x57, 0x18, 0x48, 0x39, 0xd0, 0x72, 0xc9, 0x48, 0x01, 0xca, 0x48, 0x39, 0xc2, 0x73, 0x03, 0x48,
    0x89, 0xc2, 0x48, 0x89, 0x57, 0x18, 0x8b, 0x46, 0x04, 0x83, 0xf8, 0x02, 0x74, 0x2a, 0x83, 0xf8,
    0x03, 0x74, 0x5b, 0x48, 0x8b, 0x4e, 0x10, 0x83, 0xf8, 0x01, 0x75, 0x0f, 0xe8, 0x62, 0x00, 0x00,
    0x00, 0x48, 0x3b, 0x46, 0x20, 0x73, 0x04, 0x48, 0x8b, 0x4e, 0x18, 0xe8, 0x53, 0x00, 0x00, 0x00,
    0x48, 0xf7, 0xe1, 0x49, 0x89, 0xc0, 0xeb, 0x17, 0x48, 0x8b, 0x57, 0x10, 0x48, 0x8d, 0x42, 0x01,
    0x48, 0x3b, 0x46, 0x10, 0x72, 0x02, 0x31, 0xc0, 0x48, 0x89, 0x47, 0x10, 0x4c, 0x8b, 0x07, 0x48,
    0x03, 0x56, 0x08, 0x48, 0xc1, 0xe2, 0x0c, 0x49, 0xc1, 0xe8, 0x34, 0x4c, 0x01, 0xc2, 0x48, 0x8b,
    0x07, 0x48, 0xff, 0xc0, 0x88, 0x02, 0x48, 0x89, 0x07, 0xe9, 0x52, 0xff, 0xff, 0xff, 0xf4, 0x90,
    0xe9, 0x4b, 0xff, 0xff, 0xff, 0xe6, 0x10, 0xe9, 0x44, 0xff, 0xff, 0xff, 0xe6, 0x11, 0xe9, 0x3d,
    0xff, 0xff, 0xff, 0x48, 0x8b, 0x47, 0x08, 0x48, 0x89, 0xc2, 0x48, 0xc1, 0xe2, 0x0d, 0x48, 0x31,
    0xd0, 0x48, 0x89, 0xc2, 0x48, 0xc1, 0xea, 0x07, 0x48, 0x31, 0xd0, 0x48, 0x89, 0xc2, 0x48, 0xc1,
    0xe2, 0x11, 0x48, 0x31, 0xd0, 0x48, 0x89, 0x47, 0x08, 0xc3,
];

/// Guest page size (the dirty log's granularity on x86_64).
pub const PAGE: u64 = 4096;
/// Bytes of guest-physical memory one page directory maps.
pub(crate) const GIB: u64 = 1 << 30;
/// Most vCPUs the parameter page has slots for.
pub const MAX_VCPUS: u32 = 63;

/// Parameter page offsets (see `guest.S`).
pub(crate) mod param {
    pub const CMD: u64 = 0;
    pub const WORKLOAD: u64 = 4;
    pub const FIRST_PAGE: u64 = 8;
    pub const PAGES: u64 = 16;
    pub const HOT_PAGES: u64 = 24;
    pub const HOT_THRESHOLD: u64 = 32;
    pub const TICKS_PER_WRITE: u64 = 40;
    pub const MAX_WRITES: u64 = 48;
    /// Slot offsets, relative to the slot.
    pub const SLOT_WRITES: u64 = 0;
    pub const SLOT_RNG: u64 = 8;
    pub const SLOT_DEADLINE: u64 = 24;
    pub const SLOT_BYTES: u64 = 64;
}

/// The guest-physical layout of a guest of `mem_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Guest memory size in bytes (a multiple of 2 MiB).
    pub mem_size: u64,
    /// GPA of the PML4.
    pub pml4: u64,
    /// GPA of the code page.
    pub code: u64,
    /// GPA of the parameter page.
    pub params: u64,
    /// First page (index) of the region the workload writes.
    pub first_page: u64,
    /// Pages in that region.
    pub region_pages: u64,
}

impl Layout {
    /// The layout for `mem_size` bytes, or `None` when it is not a multiple
    /// of 2 MiB or leaves fewer than 64 pages for the workload.
    pub fn new(mem_size: u64) -> Option<Layout> {
        if mem_size == 0 || !mem_size.is_multiple_of(2 << 20) {
            return None;
        }
        let gibs = mem_size.div_ceil(GIB);
        let code = 0x3000 + gibs * PAGE;
        let params = code + PAGE;
        let first_page = params / PAGE + 1;
        let pages = mem_size / PAGE;
        if pages < first_page + 64 {
            return None;
        }
        Some(Layout {
            mem_size,
            pml4: 0x1000,
            code,
            params,
            first_page,
            region_pages: pages - first_page,
        })
    }

    /// Guest pages in all.
    pub fn pages(&self) -> u64 {
        self.mem_size / PAGE
    }

    /// The page with the parameters and every vCPU's counters.
    pub fn params_page(&self) -> u64 {
        self.params / PAGE
    }

    /// GPA of vCPU `i`'s slot.
    pub(crate) fn slot(&self, i: u32) -> u64 {
        self.params + param::SLOT_BYTES * (u64::from(i) + 1)
    }

    /// The page tables, as `(gpa, u64 entries)` writes: identity map of the
    /// whole memory with 2 MiB pages, present, writable, accessed, dirty.
    pub(crate) fn page_tables(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        const P: u64 = 1; // present
        const RW: u64 = 1 << 1;
        const A: u64 = 1 << 5;
        const D: u64 = 1 << 6;
        const PS: u64 = 1 << 7;
        let gibs = self.mem_size.div_ceil(GIB);
        let pml4 = core::iter::once((self.pml4, 0x2000 | P | RW | A));
        let pdpt = (0..gibs).map(|g| (0x2000 + g * 8, (0x3000 + g * PAGE) | P | RW | A));
        let two_mib = self.mem_size >> 21;
        let pds = (0..two_mib).map(|i| (0x3000 + i * 8, (i << 21) | P | RW | A | D | PS));
        pml4.chain(pdpt).chain(pds)
    }
}

/// The guest's xorshift64 step (`next` in guest.S).
pub fn xorshift64(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

/// The page the `uniform` workload writes for random value `r` in a region
/// of `pages` pages starting at `first` (`mul` in guest.S: the high half of
/// `r * pages`).
pub fn uniform_page(r: u64, first: u64, pages: u64) -> u64 {
    first + ((u128::from(r) * u128::from(pages)) >> 64) as u64
}

/// The initial xorshift state of vCPU `i` for a run seeded with `seed`
/// (never zero: xorshift's only fixed point).
pub fn vcpu_seed(seed: u64, i: u32) -> u64 {
    let s = seed ^ (u64::from(i) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    if s == 0 {
        0x2545_F491_4F6C_DD1D
    } else {
        s
    }
}

/// The pages a single-vCPU `uniform` run seeded with `seed` writes in its
/// first `writes` writes (what the dirty log must report, plus the parameter
/// page).
pub fn uniform_pages(layout: &Layout, seed: u64, writes: u64) -> alloc::collections::BTreeSet<u64> {
    let mut x = vcpu_seed(seed, 0);
    (0..writes)
        .map(|_| {
            x = xorshift64(x);
            uniform_page(x, layout.first_page, layout.region_pages)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_rejects_what_it_cannot_map() {
        assert_eq!(Layout::new(0), None);
        assert_eq!(Layout::new(4096 * 1000), None);
        let l = Layout::new(64 << 20).unwrap();
        assert_eq!(l.code, 0x4000);
        assert_eq!(l.params, 0x5000);
        assert_eq!(l.first_page, 6);
        assert_eq!(l.region_pages, (64 << 20) / 4096 - 6);
        let big = Layout::new(5 << 30).unwrap();
        assert_eq!(big.code, 0x3000 + 5 * 4096);
    }

    #[test]
    fn page_tables_map_every_two_mib_page_once() {
        let l = Layout::new(3 << 30).unwrap();
        let pts: alloc::vec::Vec<_> = l.page_tables().collect();
        // 1 PML4 entry, 3 PDPT entries, 1536 PDEs.
        assert_eq!(pts.len(), 1 + 3 + 1536);
        let last = pts.last().unwrap();
        assert_eq!(last.0, 0x3000 + 1535 * 8);
        assert_eq!(last.1 & !0xfff, 1535 << 21);
        assert!(pts.iter().all(|&(_, e)| e & 0x21 == 0x21));
    }

    /// The bytes in GUEST_CODE are guest.S assembled (when binutils is here).
    #[test]
    fn guest_code_matches_its_source() {
        let dir = std::env::temp_dir().join(format!("spacekit-guest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/kvm/guest.S");
        let obj = dir.join("guest.o");
        let bin = dir.join("guest.bin");
        let ok = std::process::Command::new("as")
            .args(["--64", "-o"])
            .arg(&obj)
            .arg(src)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            std::println!("skipped: GNU as is not installed, guest.S not re-assembled");
            return;
        }
        let st = std::process::Command::new("objcopy")
            .args(["-O", "binary", "-j", ".text"])
            .arg(&obj)
            .arg(&bin)
            .status()
            .unwrap();
        assert!(st.success());
        let bytes = std::fs::read(&bin).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            bytes, GUEST_CODE,
            "GUEST_CODE is stale: re-assemble guest.S"
        );
    }
}
