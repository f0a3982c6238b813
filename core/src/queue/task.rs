//! What a queue hands out: a [`Task`], how it was taken ([`Mode`]), and how
//! a worker ends a reservation ([`Finish`]).

use std::time::{Duration, Instant};

/// A task taken from or read in a queue.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Task {
    /// The task id (any bytes).
    pub id: Vec<u8>,
    /// Its score: the unix time (seconds) at which it was due (for a dead
    /// task: when it used its last attempt).
    pub score: f64,
    /// For reserved tasks: the receipt that acks, nacks or touches this
    /// reservation (it names the task too: see [`Queue::ack`](super::Queue::ack)).
    pub receipt: Option<String>,
    /// For reserved tasks: unix time after which it returns to the queue.
    pub deadline: Option<f64>,
    /// For reserved tasks: this reservation's visibility timeout.
    pub visibility: Option<Duration>,
    /// How many times it has been reserved, this reservation included (a
    /// popped or listed task: the reservations it had before).
    pub attempts: u32,
    /// The data enqueued with it, if any.
    pub payload: Option<Vec<u8>>,
    /// For reserved tasks: when the reserve was sent (the reservation is ours
    /// at least until then + visibility).
    pub(crate) sent: Option<Instant>,
}

impl Task {
    /// For a reserved task: until when its reservation is ours at least (the
    /// reserve's send time plus its visibility; a touch or a heartbeat makes
    /// it longer).
    pub fn valid_until(&self) -> Option<Instant> {
        Some(self.sent? + self.visibility?)
    }

    /// A task `id` with `score` and nothing else.
    pub(crate) fn new(id: Vec<u8>, score: f64) -> Self {
        Self {
            id,
            score,
            receipt: None,
            deadline: None,
            visibility: None,
            attempts: 0,
            payload: None,
            sent: None,
        }
    }
}

/// How a take hands tasks out. The take script receives it as text
/// (`"pop"`, `"reserve"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Removed from the queue at once.
    Pop,
    /// Moved in flight until acked, nacked, or its visibility runs out.
    Reserve,
}

impl redis::ToRedisArgs for Mode {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        out.write_arg(match self {
            Mode::Pop => b"pop",
            Mode::Reserve => b"reserve",
        });
    }
}

/// How a reservation ends, sent in the same round trip as the next take
/// ([`Queue::finish_and_reserve`](super::Queue::finish_and_reserve)).
#[derive(Debug, Clone, Copy)]
pub enum Finish<'a> {
    /// Nothing to finish.
    Nothing,
    /// Done with this task: [`Queue::ack`](super::Queue::ack).
    Ack(&'a Task),
    /// Give it back, due after this delay (s), or after its backoff when
    /// `None`: [`Queue::nack`](super::Queue::nack).
    Nack(&'a Task, Option<f64>),
}

#[cfg(test)]
mod tests {
    use redis::ToRedisArgs;

    use super::Mode;

    #[test]
    fn modes_reach_the_take_script_as_the_words_it_reads() {
        assert_eq!(Mode::Pop.to_redis_args(), [b"pop".to_vec()]);
        assert_eq!(Mode::Reserve.to_redis_args(), [b"reserve".to_vec()]);
    }
}
