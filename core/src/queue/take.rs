//! Taking tasks: `pop` and `reserve` (waiting for work as asked), the
//! worker loop's `finish_and_reserve` (end one reservation and take the next
//! in one round trip), and `top`, which reads what they would take.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use redis::Value;

use super::reply::{Taken, int_at, parse_take, parse_tasks};
use super::task::{Finish, Mode, Task};
use super::{Queue, lost, receipt};
use crate::error::Result;
use crate::keys::new_token;
use crate::scripts::{Call, QUEUE_LEAVE, QUEUE_TAKE, QUEUE_TOP};
use crate::validate;
use crate::wait::{self, Attempt, Interrupt, Wait, WaitSpec};

/// What a [`Queue::finish_and_reserve`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct Step {
    /// Whether the finish took effect (false: there was none, or the
    /// reservation had been lost).
    pub finished: bool,
    /// The tasks reserved (none when the wait ran out).
    pub tasks: Vec<Task>,
}

/// What every attempt of one take sends, besides its waiter and finish.
#[derive(Debug, Clone)]
pub(super) struct TakeSpec {
    pub mode: Mode,
    pub count: usize,
    pub visibility: Option<Duration>,
    /// Max attempts, backoff and cap (ms), jitter.
    pub settings: (u32, u64, u64, f64),
    pub lease_ms: u64,
    pub legacy_timeout: Duration,
    pub wait: Wait,
    pub deadline: Option<Instant>,
}

/// An ack or nack riding on a take, checked and owned.
#[derive(Debug, Clone)]
pub(super) struct PendingFinish {
    pub how: &'static str,
    pub id: Vec<u8>,
    pub rid: String,
    pub delay: Option<f64>,
}

/// The middle of the first task's reservation text, as the take script's
/// slow path writes it from its settings (`/max/backoff/cap/jitter/visibility/`):
/// the common case then formats and parses no number (see queue_take).
/// The jitter is the script's `ratio * ((seed + 1 * 0.618...) % 1)`, same
/// arithmetic, same six decimals.
fn reservation_middle(spec: &TakeSpec, rid: &str) -> String {
    let (max, backoff, cap, ratio) = spec.settings;
    let jitter = ratio * ((receipt::seed(rid) + 0.618_033_988_749_894_9) % 1.0);
    let visibility = spec.visibility.map_or(0, validate::millis);
    format!("/{max}/{backoff}/{cap}/{jitter:.6}/{visibility}/")
}

impl Queue {
    /// Takes up to `count` due tasks (lowest score first, ties by id), waiting
    /// for work as `wait` allows. Empty when none came in time. Popped tasks
    /// leave the queue for good, with their payloads.
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
        let got = self.take(
            Mode::Pop,
            count,
            None,
            Finish::Nothing,
            wait,
            legacy_timeout,
            interrupt,
        )?;
        Ok(got.tasks)
    }

    /// Reserves one due task for `visibility` (default: the queue's): it
    /// leaves the queue, and comes back after its backoff if not acked in time.
    pub fn reserve(
        &self,
        visibility: Option<Duration>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Option<Task>> {
        Ok(self
            .reserve_many(1, visibility, wait, interrupt)?
            .into_iter()
            .next())
    }

    /// Reserves up to `count` due tasks in one round trip (see [`Queue::reserve`]).
    pub fn reserve_many(
        &self,
        count: usize,
        visibility: Option<Duration>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Task>> {
        Ok(self
            .finish_and_reserve(Finish::Nothing, count, visibility, wait, interrupt)?
            .tasks)
    }

    /// Ends a reservation as `finish` says ([`Queue::ack`] or
    /// [`Queue::nack`], same guarantees) and reserves up to `count` due tasks,
    /// in one round trip while work is due: the worker loop's step. The
    /// finish is applied once, by the first attempt, even if this then waits.
    pub fn finish_and_reserve(
        &self,
        finish: Finish<'_>,
        count: usize,
        visibility: Option<Duration>,
        wait: Wait,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Step> {
        validate::task_count(count, "count")?;
        let visibility = match visibility {
            Some(v) => validate::lifetime(v, "visibility")?,
            None => self.opts.visibility,
        };
        self.take(
            Mode::Reserve,
            count,
            Some(visibility),
            finish,
            wait,
            None,
            interrupt,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn take(
        &self,
        mode: Mode,
        count: usize,
        visibility: Option<Duration>,
        finish: Finish<'_>,
        wait: Wait,
        legacy_timeout: Option<Duration>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Step> {
        // The finish, checked before anything is sent; sent by the first attempt only.
        let pending = RefCell::new(self.pending_finish(finish)?);
        let finished = Cell::new(false);
        let spec = self.take_spec(mode, count, visibility, wait, legacy_timeout);
        let attempt = |waiter: &str| -> Result<Taken> {
            let this_finish = pending.borrow().clone();
            let taken = self.take_once(&spec, this_finish.as_ref(), waiter, interrupt)?;
            if this_finish.is_some() {
                pending.replace(None);
                finished.set(taken.finish_code() > 0);
                if let Some(f) = &this_finish {
                    self.finished_by_take(f, taken.finish_code());
                }
            }
            Ok(taken)
        };
        let step = |tasks| Step {
            finished: finished.get(),
            tasks,
        };
        match attempt("") {
            Ok(Taken::Tasks(tasks, _)) => return Ok(step(tasks)),
            Ok(Taken::Empty(..)) if wait == Wait::Try => return Ok(step(Vec::new())),
            Ok(Taken::Empty(..)) => {}
            // A wait rides out faults until its deadline (see `wait`).
            Err(e) if wait != Wait::Try && e.is_transient() => {}
            Err(e) => return Err(e),
        }
        let spec = WaitSpec {
            deadline: spec.deadline,
            recheck: self.opts.recheck,
            interrupt,
            label: &self.label,
        };
        let waiter = wait::WakeOnly {
            attempt: |waiter: &str| {
                Ok(match attempt(waiter)? {
                    Taken::Tasks(t, _) => Attempt::Done(t),
                    Taken::Empty(hint, _) => Attempt::Retry(hint),
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
        Ok(step(got.unwrap_or_default()))
    }

    /// `finish` checked and owned, for the take that carries it.
    pub(super) fn pending_finish(&self, finish: Finish<'_>) -> Result<Option<PendingFinish>> {
        let (how, task, delay) = match finish {
            Finish::Nothing => return Ok(None),
            Finish::Ack(t) => ("ack", t, None),
            Finish::Nack(t, delay) => (
                "nack",
                t,
                delay.map(|d| validate::offset(d, "delay")).transpose()?,
            ),
        };
        let receipt = task.receipt.as_deref().unwrap_or_default();
        Ok(Some(PendingFinish {
            how,
            id: task.id.clone(),
            rid: self.rid(&task.id, receipt)?.to_owned(),
            delay,
        }))
    }

    /// After a take carried `finish`, which answered `code`: a nack that
    /// used the task's last attempt (2) is reported as dead-lettered.
    pub(super) fn finished_by_take(&self, finish: &PendingFinish, code: i64) {
        if code == 2 && finish.how == "nack" {
            self.dead_lettered(&finish.id);
        }
    }

    /// What every attempt of one take sends besides its waiter and finish.
    pub(super) fn take_spec(
        &self,
        mode: Mode,
        count: usize,
        visibility: Option<Duration>,
        wait: Wait,
        legacy_timeout: Option<Duration>,
    ) -> TakeSpec {
        let o = &self.opts;
        // Backoffs in whole milliseconds, rounded up; zero stays zero.
        let ms = |d: Duration| d.as_micros().div_ceil(1000).min(u128::from(u64::MAX)) as u64;
        TakeSpec {
            mode,
            count,
            visibility,
            settings: (
                o.max_attempts.unwrap_or(0),
                ms(o.backoff),
                ms(o.backoff_cap),
                o.backoff_jitter,
            ),
            lease_ms: validate::millis(wait::lease_for(o.recheck)),
            legacy_timeout: legacy_timeout.unwrap_or(o.legacy_lock_timeout),
            wait,
            deadline: wait.deadline(),
        }
    }

    /// One attempt of a take: one run of the take script (carrying
    /// `finish`, if any), registering as `waiter` when nothing is due.
    pub(super) fn take_once(
        &self,
        spec: &TakeSpec,
        finish: Option<&PendingFinish>,
        waiter: &str,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Taken> {
        let k = &self.keys;
        let rid = new_token();
        let mut record = k.records.clone();
        record.extend_from_slice(rid.as_bytes());
        let mut keys = self.task_keys().to_vec();
        keys.push(&record);
        let (how, id, finish_rid, delay) = match finish {
            Some(f) => (f.how, f.id.as_slice(), f.rid.as_str(), f.delay),
            None => ("", &b""[..], "", None),
        };
        let received = self.received_rids();
        let settings = spec.settings;
        let mut call = QUEUE_TAKE
            .call(&keys)
            .arg(spec.mode)
            .arg(spec.count)
            .arg(self.check_legacy)
            .arg(&k.channel)
            .arg(waiter)
            .arg(spec.lease_ms)
            .arg(spec.visibility.map_or(0, validate::millis))
            .arg(&rid)
            .arg(settings.0)
            .arg(settings.1)
            .arg(settings.2)
            .arg(settings.3)
            .arg(receipt::seed(&rid))
            .arg(how)
            .arg(id)
            .arg(finish_rid)
            .arg(delay.map(|d| d.to_string()).unwrap_or_default())
            .arg(&k.records)
            .arg(reservation_middle(spec, &rid));
        for r in &received {
            call = call.arg(r);
        }
        // While waiting for work, a legacy queue lock may hold us as long as the wait.
        let legacy_wait = match spec.deadline {
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .max(spec.legacy_timeout),
            None if spec.wait == Wait::Forever => Duration::from_secs_f64(validate::MAX_SECONDS),
            None => spec.legacy_timeout,
        };
        let sent = Instant::now();
        let reply = self.legacy_retry(Some(legacy_wait), interrupt, || {
            self.run_take(&call, &keys, &rid, spec.wait, spec.deadline, interrupt)
        })?;
        // The script recorded what it did: the record goes with the next take.
        if matches!(int_at(&reply, 0), 1 | 3) || finish.is_some() {
            self.reply_received(rid.clone());
        }
        let reserved = spec.visibility.map(|v| (rid.as_str(), v, sent));
        parse_take(&reply, reserved).map_err(|e| e.context(&self.label))
    }

    /// Runs a take. When its reply is lost, the same call (same rid) is
    /// sent again while the caller's wait lasts: the take's record answers
    /// it, or it runs then. Out of time (or interrupted), the take is given
    /// up: what it may have taken goes back to the queue, at once or by the
    /// keeper once the server answers (see `lost.rs`).
    fn run_take(
        &self,
        call: &Call,
        keys: &[&[u8]],
        rid: &str,
        wait: Wait,
        deadline: Option<Instant>,
        interrupt: Option<Interrupt<'_>>,
    ) -> Result<Vec<Value>> {
        let mut last = match call.run::<Vec<Value>>(&self.client, &self.label) {
            Err(e) if e.outcome_unknown() => e,
            other => return other,
        };
        for n in 0.. {
            let pause = lost::resend_pause(n);
            let time_left = match wait {
                Wait::Forever => true,
                Wait::For(_) => deadline.is_some_and(|d| Instant::now() + pause < d),
                Wait::Try => false,
            };
            if !time_left {
                break;
            }
            if let Err(e) = wait::pause(pause, interrupt) {
                self.give_up_take(keys, rid);
                return Err(e);
            }
            match call.run::<Vec<Value>>(&self.client, &self.label) {
                Ok(reply) => return Ok(reply),
                // Whatever this one did, the first may have run: still unknown.
                Err(e) => last = e,
            }
        }
        self.give_up_take(keys, rid);
        Err(last.with_outcome_unknown().context_after(
            "what the call may have taken goes back to the queue once the server answers",
        ))
    }

    /// Gives up the take `rid` (see `lost.rs`), by the keeper: the caller's
    /// time is up.
    fn give_up_take(&self, keys: &[&[u8]], rid: &str) {
        let settlement = Box::new(lost::GiveUpTake {
            client: self.client.clone(),
            keys: keys.iter().map(|k| k.to_vec()).collect(),
            rid: rid.to_owned(),
            channel: self.keys.channel.clone(),
            horizon: Instant::now() + lost::RECORD_TTL,
            label: self.label.clone(),
        });
        let _ = crate::settle::settle_or_defer(settlement, lost::no_time());
    }

    pub(super) fn leave(&self, waiter: &str) -> Result<()> {
        let k = &self.keys;
        let call = QUEUE_LEAVE
            .call(&[&k.queue, &k.inflight, &k.waiters, &k.leases])
            .arg(waiter)
            .arg(&k.channel);
        call.run::<i64>(&self.client, &self.label).map(drop)
    }

    /// The first `count` due tasks: the ones [`Queue::pop`] would take, left
    /// in place (expired reservations are ended first, as pop does, and
    /// waiting consumers told).
    pub fn top(&self, count: usize) -> Result<Vec<Task>> {
        validate::task_count(count, "count")?;
        let call = QUEUE_TOP
            .call(&self.task_keys())
            .arg(count)
            .arg(self.check_legacy)
            .arg(&self.keys.channel);
        let reply: Vec<Value> = call.run(&self.client, &self.label)?;
        let none = Value::Int(0);
        let at = |i: usize| reply.get(i).unwrap_or(&none);
        parse_tasks(at(0), at(1), at(2)).map_err(|e| e.context(&self.label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RedisServer;

    /// The client writes the jitter the script's slow path would: same
    /// text, computed by Lua on a real server, for many seeds and ratios.
    #[test]
    fn the_reservation_middle_is_what_the_script_would_write() {
        let server = RedisServer::start();
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let lua = "return string.format('%.6f', tonumber(ARGV[1]) \
                   * ((tonumber(ARGV[2]) + 1 * 0.6180339887498949) % 1))";
        for (i, ratio) in [0.0, 0.1, 0.25, 1.0 / 3.0, 0.5, 1.0]
            .iter()
            .cycle()
            .take(300)
            .enumerate()
        {
            let rid = crate::new_token();
            let spec = TakeSpec {
                mode: Mode::Reserve,
                count: 1,
                visibility: Some(Duration::from_millis(30_000 + i as u64)),
                settings: (5, 1000, 60_000, *ratio),
                lease_ms: 0,
                legacy_timeout: Duration::ZERO,
                wait: Wait::Try,
                deadline: None,
            };
            let jitter: String = redis::cmd("EVAL")
                .arg(lua)
                .arg(0)
                .arg(*ratio)
                .arg(receipt::seed(&rid))
                .query(&mut con)
                .unwrap();
            assert_eq!(
                reservation_middle(&spec, &rid),
                format!("/5/1000/60000/{jitter}/{}/", 30_000 + i),
                "ratio {ratio}, rid {rid}"
            );
        }
    }
}
