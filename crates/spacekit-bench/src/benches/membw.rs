//! `bench membw`: single-thread and all-thread memory read bandwidth (see
//! [`crate::harness::membw`]).

use crate::harness::membw::{buffer, measure};
use crate::{BenchError, Ctx, Report};

/// Runs `bench membw` on its own.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let (report, _) = measure(ctx, &buffer(ctx)?)?;
    Ok(report)
}
