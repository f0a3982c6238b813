//! Taking tasks: `pop` and `reserve` (waiting for work as asked), and
//! `top`, which reads what they would take.

use std::time::{Duration, Instant};

use redis::Value;

use super::Queue;
use super::reply::{Taken, parse_pairs, parse_take};
use super::task::{Mode, Task};
use crate::error::Result;
use crate::keys::new_token;
use crate::scripts::{QUEUE_LEAVE, QUEUE_TAKE, QUEUE_TOP};
use crate::validate;
use crate::wait::{self, Attempt, Interrupt, Wait, WaitSpec};

impl Queue {
    /// Takes up to `count` due tasks (lowest score first, ties by id), waiting
    /// for work as `wait` allows. Empty when none came in time.
    /// `legacy_timeout`: how long to wait for a legacy client's queue lock
    /// (default: the queue's `legacy_lock_timeout`).
    pub fn pop(
        &self,
        count: usize,
        wait: Wait,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Task>> {
        validate::task_count(count, "count")?;
        self.take(Mode::Pop, count, None, wait, legacy_timeout, interrupt)
    }

    /// Reserves one due task for `visibility` (default: the queue's): it leaves
    /// the queue, and comes back if not acked in time.
    pub fn reserve(
        &self,
        visibility: Option<Duration>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Option<Task>> {
        let visibility = match visibility {
            Some(v) => validate::lifetime(v, "visibility")?,
            None => self.opts.visibility,
        };
        Ok(self
            .take(Mode::Reserve, 1, Some(visibility), wait, None, interrupt)?
            .into_iter()
            .next())
    }

    fn take(
        &self,
        mode: Mode,
        count: usize,
        visibility: Option<Duration>,
        wait: Wait,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Task>> {
        let legacy_timeout = legacy_timeout.unwrap_or(self.opts.legacy_lock_timeout);
        let lease_ms = validate::millis(wait::lease_for(self.opts.recheck));
        let deadline = wait.deadline();
        let attempt = |waiter: &str| -> Result<Taken> {
            let k = &self.keys;
            let receipt = if mode == Mode::Reserve {
                new_token()
            } else {
                String::new()
            };
            let call = QUEUE_TAKE
                .call(&self.task_keys())
                .arg(mode)
                .arg(count)
                .arg(self.check_legacy)
                .arg(&k.channel)
                .arg(waiter)
                .arg(lease_ms)
                .arg(visibility.map_or(0, validate::millis))
                .arg(&receipt);
            // While waiting for work, a legacy queue lock may hold us as long as the wait.
            let legacy_wait = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .max(legacy_timeout),
                None if wait == Wait::Forever => Duration::from_secs_f64(validate::MAX_SECONDS),
                None => legacy_timeout,
            };
            let reply = self.legacy_retry(Some(legacy_wait), interrupt, || {
                call.run::<Vec<Value>>(&self.client, &self.label)
            })?;
            parse_take(&reply, mode).map_err(|e| e.context(&self.label))
        };
        match attempt("") {
            Ok(Taken::Tasks(tasks)) => return Ok(tasks),
            Ok(Taken::Empty(_)) if wait == Wait::Try => return Ok(Vec::new()),
            Ok(Taken::Empty(_)) => {}
            // A wait rides out faults until its deadline (see `wait`).
            Err(e) if wait != Wait::Try && e.is_transient() => {}
            Err(e) => return Err(e),
        }
        let spec = WaitSpec {
            deadline,
            recheck: self.opts.recheck,
            interrupt,
            label: &self.label,
        };
        let waiter = wait::WakeOnly {
            attempt: |waiter: &str| {
                Ok(match attempt(waiter)? {
                    Taken::Tasks(t) => Attempt::Done(t),
                    Taken::Empty(hint) => Attempt::Retry(hint),
                })
            },
            leave: |waiter: &str| self.leave(waiter),
        };
        let got = wait::wait_loop(
            &self.client,
            &self.keys.queue,
            &self.keys.channel,
            spec,
            &waiter,
        )?;
        Ok(got.unwrap_or_default())
    }

    fn leave(&self, waiter: &str) -> Result<()> {
        let k = &self.keys;
        let call = QUEUE_LEAVE
            .call(&[&k.queue, &k.inflight, &k.waiters, &k.leases])
            .arg(waiter)
            .arg(&k.channel);
        call.run::<i64>(&self.client, &self.label).map(drop)
    }

    /// The first `count` due tasks: the ones [`Queue::pop`] would take, left
    /// in place (expired reservations are given back first, as pop does, and
    /// waiting consumers told).
    pub fn top(&self, count: usize) -> Result<Vec<Task>> {
        validate::task_count(count, "count")?;
        let k = &self.keys;
        let call = QUEUE_TOP
            .call(&self.task_keys())
            .arg(count)
            .arg(self.check_legacy)
            .arg(&k.channel);
        let items: Vec<Value> = call.run(&self.client, &self.label)?;
        parse_pairs(&items).map_err(|e| e.context(&self.label))
    }
}
