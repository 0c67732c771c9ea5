//! A real KVM guest that dirties memory on purpose, its dirty log, cleared
//! log and dirty ring harvested into ranges, and a pre-copy live migration of
//! its memory (feature `kvm`, Linux x86_64).
//!
//! * [`Guest`] creates a VM on `/dev/kvm` with one memory slot (dirty logging
//!   on) backed by vm-memory's `GuestMemoryMmap` with spacekit's
//!   [`VmmBitmap`](crate::dirty::VmmBitmap) as its bitmap, so host-side writes
//!   through vm-memory land in the VMM's own log. Its vCPUs run a few hundred
//!   bytes of 64-bit code ([`layout`], `guest.S`) that write one byte to pages
//!   picked by a [`Workload`], paced to a target rate, counting their writes.
//! * [`DirtyTracker`] harvests the three logs of a round into reused buffers:
//!   `KVM_GET_DIRTY_LOG` (with `KVM_CLEAR_DIRTY_LOG` of just the harvested
//!   pages when `KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2` is on), or the per-vCPU
//!   dirty rings (`KVM_CAP_DIRTY_LOG_RING`, reset with
//!   `KVM_RESET_DIRTY_RINGS`), and the VMM's `DirtyBitmap`; and builds the
//!   round's `MemoryRangeTable` from the OR of the logs without building it.
//! * [`migrate()`] runs a pre-copy migration of the guest's memory to a
//!   receiver in Cloud Hypervisor's wire format ([`crate::migration`]).
//!
//! The ioctls come from `kvm-ioctls` where it has them. Three it does not wrap
//! (`KVM_GET_DIRTY_LOG` into a caller's buffer, `KVM_CLEAR_DIRTY_LOG`,
//! `KVM_RESET_DIRTY_RINGS`) are declared with `vmm-sys-util`'s ioctl macros
//! from `kvm-bindings`' structures and `KVMIO`.

pub mod converge;
mod error;
mod guest;
pub mod layout;
pub mod migrate;
mod report;
mod ring;
pub mod snapshot;
pub mod throttle;
mod tracker;

pub use error::KvmError;
pub use guest::{DirtyMode, Guest, GuestConfig, GuestMem, Workload};
pub use migrate::{
    migrate, migrate_connections, GuestSource, MigrateConfig, MigrationReport, RoundReport,
};
pub use tracker::{DirtyTracker, Harvest};

/// Whether this process can run a KVM guest: `Ok` when `/dev/kvm` opens and
/// a VM can be created, else the reason (for tests that skip with one line).
pub fn available() -> Result<(), KvmError> {
    let kvm = kvm_ioctls::Kvm::new().map_err(|e| KvmError::Unavailable {
        reason: std::format!("open /dev/kvm: {e}"),
    })?;
    kvm.create_vm().map_err(|e| KvmError::Unavailable {
        reason: std::format!("KVM_CREATE_VM: {e}"),
    })?;
    Ok(())
}
