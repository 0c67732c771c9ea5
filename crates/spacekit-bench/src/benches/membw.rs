//! `bench membw`: single-thread and all-thread memory read bandwidth (see
//! [`crate::harness::membw`]).

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx};
use crate::harness::membw::{buffer, measure};
use crate::harness::Report;

/// Runs `bench membw` on its own.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let (mut report, _) = measure(ctx, &buffer(ctx)?)?;
    let chart = Chart::new(
        "membw: memory read bandwidth vs threads reading",
        "threads",
        "GB/s",
        XAxis::Linear,
        false,
    )
    .from_rows(&report.rows, "threads", "gbps");
    report.chart(chart);
    Ok(report)
}
