//! Queue behaviour against a real redis-server, one module per concern (one
//! test binary: each file directly under `tests/` would be another to link).
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;

mod basic;
mod dead;
mod faults;
mod payloads;
mod reliable;
mod replicas;
mod steps;
mod worker;

use ferrolock::Task;

/// The ids of `tasks`, as text.
pub fn ids(tasks: &[Task]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| String::from_utf8_lossy(&t.id).into_owned())
        .collect()
}
