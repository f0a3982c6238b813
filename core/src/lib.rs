//! # ferrolock
//!
//! Distributed locks and a task queue on Redis — the shared core of the
//! `ferrolock` Python package and the PHP extension. All semantics live here;
//! the bindings only convert arguments and map errors.
//!
//! ```no_run
//! use ferrolock::{Client, Lock, LockOptions, Queue, QueueOptions, Wait};
//! use std::time::Duration;
//!
//! let client = Client::shared("redis://127.0.0.1:6379/0")?;
//! let lock = Lock::new(&client, b"orders", LockOptions::default())?;
//! if lock.acquire(Wait::For(Duration::from_secs(5)), None)? {
//!     // … critical section; pass lock.fencing_token()? to your storage …
//!     lock.release()?;
//! }
//! let queue = Queue::new(&client, b"mails", QueueOptions::default())?;
//! queue.enqueue(&[b"42".as_slice()], 0.0, None, None)?;
//! for task in queue.pop(10, Wait::Try, None, None)? {
//!     println!("{} due at {}", String::from_utf8_lossy(&task.id), task.score);
//! }
//! # Ok::<(), ferrolock::Error>(())
//! ```
//!
//! Redis layout: see [`keys`]. Waiting: see [`wait`]. Operators' views,
//! events and metrics: see [`ops`]. Renewal
//! ([`LockOptions::auto_renew`]): one background thread per process renews
//! held locks every ttl/3, batched per server, and reports a lock lost when a
//! renewal finds it gone or none succeeded within its TTL.
#![warn(missing_docs)]

mod budget;
mod client;
mod config;
mod error;
mod fork;
pub mod keys;
mod lock;
pub mod ops;
mod queue;
mod scripts;
mod settle;
mod signals;
mod sync;
pub mod validate;
pub mod wait;
mod watchdog;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use client::Client;
pub use config::parts::UrlParts;
pub use config::{
    Config, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_URL, default_url,
};
pub use error::{Error, ErrorKind, Result};
pub use keys::{DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX, new_token};
pub use lock::redlock::{Redlock, RedlockSteps};
pub use lock::single::{Lock, caller_thread_id};
pub use lock::waiter::AcquireSteps;
pub use lock::{DEFAULT_TTL, DistributedLock, LockOptions};
pub use ops::{InFlight, InFlightPage, Inspector, Listing, LockInfo, QueueInfo, Waiter};
pub use queue::{
    DEFAULT_BACKOFF, DEFAULT_BACKOFF_CAP, DEFAULT_BACKOFF_JITTER, DEFAULT_LEGACY_LOCK_TIMEOUT,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_VISIBILITY, Finish, Heartbeat, NextSteps, Outcome, Queue,
    QueueOptions, QueueStats, Step, TakeSteps, Task, Worker, WorkerOptions,
};
pub use settle::{pending_settlements, wait_settled};
pub use wait::Wait;
