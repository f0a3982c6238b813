//! What a queue hands out: a [`Task`], and how it was taken ([`Mode`]).

/// A task taken from or read in a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task id (any bytes).
    pub id: Vec<u8>,
    /// Its score: the unix time (seconds) at which it was due.
    pub score: f64,
    /// For reserved tasks: the receipt that acks or nacks this reservation.
    pub receipt: Option<String>,
    /// For reserved tasks: unix time after which it returns to the queue.
    pub deadline: Option<f64>,
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
