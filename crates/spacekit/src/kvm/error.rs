//! [`KvmError`]: what went wrong with a KVM guest.

use core::fmt;
use std::string::String;

use crate::migration::MigrationError;

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
    /// A snapshot file could not be written or read.
    Snapshot(crate::snapshot::SnapshotError),
    /// The migration did not converge on its downtime target before its
    /// timeout or last allowed round, and was abandoned (the receiver was
    /// sent `Abandon`; the source guest runs on). The report holds every
    /// round sent.
    NotConverged {
        /// The rounds so far (`differing_pages` empty: nothing was compared).
        report: std::boxed::Box<super::report::MigrationReport>,
    },
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
            KvmError::Snapshot(e) => write!(f, "snapshot: {e}"),
            KvmError::NotConverged { report } => {
                let last = report.rounds.last();
                write!(
                    f,
                    "the migration did not converge: after {} rounds and {:.2?}, {} pages were \
                     still dirty; abandoned",
                    report.rounds.len(),
                    report.precopy,
                    last.map_or(0, |r| r.dirty_pages)
                )
            }
        }
    }
}

impl std::error::Error for KvmError {}

impl From<crate::dirty::DirtyError> for KvmError {
    fn from(e: crate::dirty::DirtyError) -> Self {
        KvmError::Dirty(e)
    }
}

/// An ioctl's failure as a [`KvmError`].
pub(crate) fn ioctl_err(what: &'static str, e: kvm_ioctls::Error) -> KvmError {
    KvmError::Ioctl {
        what,
        errno: e.errno(),
    }
}

impl From<MigrationError> for KvmError {
    fn from(e: MigrationError) -> Self {
        KvmError::Migration(e)
    }
}
