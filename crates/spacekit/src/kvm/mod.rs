//! A real KVM guest (work in progress).
