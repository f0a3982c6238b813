//! Lock behaviour against a real redis-server, one module per concern (one
//! test binary: each file directly under `tests/` would be another to link).
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;

mod basic;
mod faults;
mod fencing;
mod legacy;
mod native;
mod renewal_reuse;
mod replicas;
mod restore;
mod steps;
mod wait_faults;
mod waiting;
mod watchdog;
