//! Uncontended acquire+release pairs of one `Lock`, for counting the
//! client's instructions per pair (`bench/instructions.py` runs it under
//! callgrind twice, with two pair counts, and takes the difference).
//!
//! `cargo run --release --example uncontended -- redis://127.0.0.1:6379 5000`;
//! `RENEW=1` in the environment turns the watchdog on (Python's default).

use ferrolock::{Client, Lock, LockOptions, Wait};

fn main() -> ferrolock::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(ferrolock::default_url);
    let pairs: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(5000);
    let client = Client::shared(&url)?;
    let mut opts = LockOptions::default();
    opts.auto_renew = std::env::var_os("RENEW").is_some_and(|v| v == "1");
    let lock = Lock::new(&client, b"bench-instructions-rs", opts)?;
    // Connect and load the scripts before counting.
    for _ in 0..10 {
        lock.acquire(Wait::Try, None)?;
        lock.release()?;
    }
    let started = std::time::Instant::now();
    for _ in 0..pairs {
        if !lock.acquire(Wait::Try, None)? {
            eprintln!("the lock was busy: is another client using it?");
            std::process::exit(1);
        }
        lock.release()?;
    }
    let per_pair = started.elapsed().as_secs_f64() * 1e6 / pairs.max(1) as f64;
    eprintln!("{pairs} pairs, {per_pair:.1} µs per pair");
    Ok(())
}
