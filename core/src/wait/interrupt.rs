//! How a wait stays interruptible: it consults the caller's hook every
//! [`INTERRUPT_SLICE`], whether it listens for a message or just pauses.

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// How often an interrupt hook is consulted while waiting.
pub const INTERRUPT_SLICE: Duration = Duration::from_millis(50);

/// A caller-supplied check run while waiting; an `Err` aborts the wait with that
/// error (the Python binding raises `KeyboardInterrupt` through it).
pub type Interrupt<'a> = &'a (dyn Fn() -> Result<()> + 'a);

/// Sleeps up to `pause` in slices, consulting `interrupt` (used where no
/// notification exists: a legacy client's queue lock is released by DEL).
pub(crate) fn pause(pause: Duration, interrupt: Option<Interrupt<'_>>) -> Result<()> {
    let until = Instant::now() + pause;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(INTERRUPT_SLICE));
        if let Some(check) = interrupt {
            check()?;
        }
    }
}

/// The error a wait hook should return to abort a wait.
pub fn interrupted(what: &str) -> Error {
    Error::new(ErrorKind::Interrupted, format!("{what}: interrupted"))
}
