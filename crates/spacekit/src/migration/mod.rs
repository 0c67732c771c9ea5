//! Cloud Hypervisor's migration stream (work in progress).
