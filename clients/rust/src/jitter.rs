//! Jitter for poll intervals: a xorshift generator seeded from the clock and
//! the process id (no crate needed; the quality asked of it is small).

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn seed() -> u64 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (t ^ ((std::process::id() as u64) << 32)) | 1
}

thread_local!(static STATE: Cell<u64> = Cell::new(seed()));

/// A uniform value in [0, 1).
pub(crate) fn unit() -> f64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// `d` less up to a quarter of it.
pub(crate) fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 - 0.25 * unit())
}
