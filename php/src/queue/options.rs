//! The settings `RedisQueue` reads from arrays: its constructor's queue
//! settings and `work()`'s options.

use std::time::Duration;

use ext_php_rs::exception::PhpResult;
use ext_php_rs::types::{ZendHashTable, Zval};
use ferrolock::{QueueOptions, Wait, WorkerOptions, validate};

use crate::args::{cap_wait, type_name};
use crate::errors::{exception, lock_exception};

/// The queue settings a constructor array may hold besides the connection:
/// `visibility`, `max_attempts` (null: unlimited), `backoff`, `backoff_cap`,
/// `backoff_jitter`, `min_replicas`. Unknown keys are the connection's (see `connect.rs`).
pub(super) fn queue_settings(param: Option<&Zval>, opts: &mut QueueOptions) -> PhpResult<()> {
    let Some(array) = param.and_then(Zval::array) else {
        return Ok(());
    };
    let bad = |key: &str, allowed: &str, value: &Zval| {
        lock_exception(format!(
            "connection array: '{key}' must be {allowed}, got {}",
            type_name(value)
        ))
    };
    let number = |key: &str, value: &Zval| -> PhpResult<f64> {
        value
            .double()
            .or_else(|| value.long().map(|l| l as f64))
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad(key, "a number of seconds", value))
    };
    let secs = |key: &str, value: &Zval, zero_ok: bool| -> PhpResult<Duration> {
        validate::seconds(number(key, value)?, key, zero_ok).map_err(exception)
    };
    for (key, value) in array.iter() {
        let key = key.to_string();
        let value = value.dereference();
        match key.as_str() {
            "visibility" => opts.visibility = secs(&key, value, true)?,
            "backoff" => opts.backoff = secs(&key, value, true)?,
            "backoff_cap" => opts.backoff_cap = secs(&key, value, true)?,
            "backoff_jitter" => opts.backoff_jitter = number(&key, value)?,
            "min_replicas" => {
                let n = value
                    .long()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad(&key, "an int >= 0", value))?;
                opts.min_replicas = u32::try_from(n).unwrap_or(u32::MAX);
            }
            "max_attempts" if value.is_null() => opts.max_attempts = None,
            "max_attempts" => {
                let n = value
                    .long()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad(&key, "an int >= 1 or null (unlimited)", value))?;
                opts.max_attempts = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `work()`'s options: the worker's, and `max_jobs` (0: no limit). A wrong
/// type is a `TypeError`; a bad value, a warning (through `settle`).
pub(super) fn work_options(
    options: Option<&ZendHashTable>,
) -> ferrolock::Result<(WorkerOptions, i64)> {
    let mut opts = WorkerOptions::default();
    let mut max_jobs = 0;
    let Some(array) = options else {
        return Ok((opts, max_jobs));
    };
    let number = |key: &str, z: &Zval| -> ferrolock::Result<f64> {
        z.double()
            .or_else(|| z.long().map(|l| l as f64))
            .ok_or_else(|| {
                ferrolock::Error::invalid(format!(
                    "{key} must be a number of seconds or null, got {}",
                    type_name(z)
                ))
            })
    };
    for (key, value) in array.iter() {
        let key = key.to_string();
        let value = value.dereference();
        match key.as_str() {
            "wait" if value.is_null() => opts.wait = Wait::Forever,
            "wait" => {
                opts.wait = Wait::from_secs(Some(cap_wait(number(&key, value)?)), "wait")?;
            }
            "visibility" if value.is_null() => opts.visibility = None,
            "visibility" => {
                opts.visibility = Some(validate::ttl(number(&key, value)?, "visibility")?);
            }
            "heartbeat" => opts.heartbeat = value.coerce_to_bool(),
            "max_jobs" => match value.long() {
                Some(n) if n >= 0 => max_jobs = n,
                _ => {
                    return Err(ferrolock::Error::invalid(format!(
                        "max_jobs must be an int >= 0, got {}",
                        type_name(value)
                    )));
                }
            },
            other => {
                return Err(ferrolock::Error::invalid(format!(
                    "unknown option '{other}' (wait, visibility, heartbeat, max_jobs)"
                )));
            }
        }
    }
    Ok((opts, max_jobs))
}
