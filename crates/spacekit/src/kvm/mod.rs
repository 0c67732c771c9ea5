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
//! * [`migrate`] runs a pre-copy migration of the guest's memory to a
//!   receiver in Cloud Hypervisor's wire format ([`crate::migration`]).
//!
//! The ioctls come from `kvm-ioctls` where it has them. Three it does not wrap
//! (`KVM_GET_DIRTY_LOG` into a caller's buffer, `KVM_CLEAR_DIRTY_LOG`,
//! `KVM_RESET_DIRTY_RINGS`) are declared with `vmm-sys-util`'s ioctl macros
//! from `kvm-bindings`' structures and `KVMIO`.

mod guest;
pub mod layout;
pub mod migrate;
mod tracker;

pub use guest::{DirtyMode, Guest, GuestConfig, Workload};
pub use migrate::{migrate, GuestSource, MigrateConfig, MigrationReport, RoundReport};
pub use tracker::{DirtyTracker, Harvest};

use core::fmt;
use std::string::String;

/// What went wrong with a KVM guest.
#[derive(Debug)]
#[non_exhaustive]
pub enum KvmError {
    /// `/dev/kvm` cannot be opened or a VM cannot be created: KVM is not
    /// usable here.
    Unavailable {
        /// What failed and why.
        reason: String,
    },
    /// A capability this mode needs is not offered by the kernel.
    MissingCapability {
        /// The capability's name.
        name: &'static str,
    },
    /// A guest configuration that cannot be built.
    BadConfig {
        /// What is wrong with it.
        reason: String,
    },
    /// The host could not map the guest's memory.
    Map {
        /// Bytes asked for.
        size: u64,
        /// The mapping error.
        reason: String,
    },
    /// An ioctl failed.
    Ioctl {
        /// The ioctl.
        what: &'static str,
        /// The errno it returned.
        errno: i32,
    },
    /// A vCPU left the guest in a way the guest code never does.
    UnexpectedExit {
        /// The vCPU.
        vcpu: u32,
        /// The exit, as debug text.
        exit: String,
    },
    /// A dirty ring was pushed past its end (KVM is meant to stop the vCPU
    /// a few dozen entries before): the overwritten entries' pages are lost,
    /// so the ring can no longer say what is dirty. Use a larger ring, a
    /// slower guest, or the dirty log.
    RingOverflow,
    /// A dirty-log call failed (buffer lengths, ranges).
    Dirty(crate::dirty::DirtyError),
    /// The migration stream or its receiver failed.
    Migration(crate::migration::MigrationError),
}

impl fmt::Display for KvmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvmError::Unavailable { reason } => write!(f, "KVM is not usable here: {reason}"),
            KvmError::MissingCapability { name } => {
                write!(f, "the kernel's KVM does not offer {name}")
            }
            KvmError::BadConfig { reason } => write!(f, "bad guest configuration: {reason}"),
            KvmError::Map { size, reason } => {
                write!(f, "cannot map {size} bytes of guest memory: {reason}")
            }
            KvmError::Ioctl { what, errno } => write!(
                f,
                "{what} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            KvmError::UnexpectedExit { vcpu, exit } => {
                write!(f, "vCPU {vcpu} left the guest unexpectedly: {exit}")
            }
            KvmError::RingOverflow => write!(
                f,
                "a dirty ring overflowed: entries were overwritten and their pages are unknown"
            ),
            KvmError::Dirty(e) => write!(f, "dirty log: {e}"),
            KvmError::Migration(e) => write!(f, "migration: {e}"),
        }
    }
}

impl std::error::Error for KvmError {}

impl From<crate::dirty::DirtyError> for KvmError {
    fn from(e: crate::dirty::DirtyError) -> Self {
        KvmError::Dirty(e)
    }
}

pub(crate) fn ioctl_err(what: &'static str, e: kvm_ioctls::Error) -> KvmError {
    KvmError::Ioctl {
        what,
        errno: e.errno(),
    }
}

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
