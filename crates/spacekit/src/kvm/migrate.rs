//! Pre-copy live migration of a guest's memory (to come).
