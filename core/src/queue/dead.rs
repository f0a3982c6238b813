//! Dead letters (tasks that used their last attempt) and what a queue holds.

use redis::Value;

use super::Queue;
use super::reply::{float, int_at, parse_tasks};
use super::task::Task;
use crate::error::Result;
use crate::keys::QueueKeys;
use crate::scripts::{Call, QUEUE_DEAD, QUEUE_STATS};
use crate::validate;

/// Dead tasks retried or purged per round trip when all are (each script
/// call stays short, so Redis keeps serving others in between).
const DEAD_BATCH: usize = 1000;

/// Ids per round trip when the caller names them.
const IDS_BATCH: usize = 500;

/// What a queue holds, read in one round trip without scanning it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Queued tasks due now.
    pub due: u64,
    /// Queued tasks due later.
    pub delayed: u64,
    /// Reservations not yet acked (those whose visibility ran out included,
    /// until the next take ends them).
    pub in_flight: u64,
    /// Tasks in the dead set.
    pub dead: u64,
    /// How long the oldest due task has been due, in seconds (0 when none is).
    pub oldest_due_age: f64,
}

/// What to do with dead tasks.
#[derive(Clone, Copy)]
enum DeadOp {
    Retry,
    Purge,
}

impl Queue {
    /// Counts of due, delayed, in-flight and dead tasks, and the age of the
    /// oldest due task: one round trip, O(log n).
    pub fn stats(&self) -> Result<QueueStats> {
        let reply: Vec<Value> = stats_call(&self.keys).run(&self.client, &self.label)?;
        parse_stats(&reply).map_err(|e| e.context(&self.label))
    }

    /// A nack of this process sent task `id` to the dead set: counted, and
    /// reported (`ops::events`).
    pub(crate) fn dead_lettered(&self, id: &[u8]) {
        use crate::ops::{events, metrics};
        metrics::count(&metrics::DEAD_LETTERED);
        events::emit_with(|| {
            events::Event::new(
                events::EventKind::DeadLettered,
                &self.name,
                format!(
                    "{}: task {:?} used its last attempt: moved to the dead set",
                    self.label,
                    String::from_utf8_lossy(id)
                ),
            )
        });
    }

    /// Up to `count` dead tasks from `offset` on, oldest death first: id,
    /// score = when it died, attempts, payload.
    pub fn dead(&self, offset: usize, count: usize) -> Result<Vec<Task>> {
        validate::task_count(count, "count")?;
        let call = QUEUE_DEAD
            .call(&self.task_keys())
            .arg("list")
            .arg(offset)
            .arg(count);
        let reply: Vec<Value> = call.run(&self.client, &self.label)?;
        let none = Value::Int(0);
        let at = |i: usize| reply.get(i).unwrap_or(&none);
        parse_tasks(at(0), at(1), at(2)).map_err(|e| e.context(&self.label))
    }

    /// Puts dead tasks back into the queue, due now, their attempts reset
    /// (payloads kept): those of `ids` that are dead, or all when `None`
    /// (in batches of a thousand per round trip). Returns how many.
    pub fn retry_dead<I: AsRef<[u8]>>(&self, ids: Option<&[I]>) -> Result<usize> {
        self.dead_op(DeadOp::Retry, ids)
    }

    /// Deletes dead tasks with their payloads: those of `ids` that are dead,
    /// or all when `None` (in batches). Returns how many.
    pub fn purge_dead<I: AsRef<[u8]>>(&self, ids: Option<&[I]>) -> Result<usize> {
        self.dead_op(DeadOp::Purge, ids)
    }

    fn dead_op<I: AsRef<[u8]>>(&self, op: DeadOp, ids: Option<&[I]>) -> Result<usize> {
        let word = match op {
            DeadOp::Retry => "retry",
            DeadOp::Purge => "purge",
        };
        let run = |batch: &[&[u8]]| -> Result<usize> {
            let mut call = QUEUE_DEAD
                .call(&self.task_keys())
                .arg(word)
                .arg(&self.keys.channel)
                .arg(DEAD_BATCH);
            for id in batch {
                call = call.arg(*id);
            }
            let reply: Vec<Value> = call.run(&self.client, &self.label)?;
            Ok(usize::try_from(int_at(&reply, 0)).unwrap_or(0))
        };
        let mut done = 0;
        match ids {
            Some(ids) => {
                let ids: Vec<&[u8]> = ids.iter().map(AsRef::as_ref).collect();
                for id in &ids {
                    validate::name(id, "task id")?;
                }
                for chunk in ids.chunks(IDS_BATCH) {
                    done += run(chunk)?;
                }
            }
            None => loop {
                let n = run(&[])?;
                done += n;
                if n < DEAD_BATCH {
                    break;
                }
            },
        }
        Ok(done)
    }
}

/// The stats script's call for the queue of `k` (see [`Queue::stats`]).
pub(crate) fn stats_call(k: &QueueKeys) -> Call {
    QUEUE_STATS.call(&[&k.queue, &k.inflight, &k.dead])
}

/// Reads the stats script's reply.
pub(crate) fn parse_stats(reply: &[Value]) -> Result<QueueStats> {
    let n = |i| u64::try_from(int_at(reply, i)).unwrap_or(0);
    let age = reply.get(4).map(float).transpose()?.unwrap_or(0.0);
    Ok(QueueStats {
        due: n(0),
        delayed: n(1),
        in_flight: n(2),
        dead: n(3),
        oldest_due_age: age,
    })
}
