//! The subscription a waiter listens on: subscribing on the right node, and
//! reading its messages in interruptible slices.

use std::time::{Duration, Instant};

use super::interrupt::{INTERRUPT_SLICE, Interrupt};
use crate::client::Client;
use crate::client::conn::is_stale;
use crate::client::subscriber::{Pooled, Subscriber};
use crate::error::{Error, Result};

/// A connection of `client` subscribed to `channel`, on the node serving
/// `node_key`. A pooled connection that the server has closed since (a
/// restart, its `timeout` setting, a proxy's idle cut) fails on first use: it
/// is replaced by a new one, as `Client::run` does for commands, and the other
/// idle ones of that node are dropped. `context` prefixes error messages.
pub(crate) fn subscribed(
    client: &Client,
    node_key: &[u8],
    channel: &[u8],
    context: &str,
) -> Result<Subscriber> {
    let timeout = client.command_timeout();
    let mut sub = client
        .checkout_subscriber(node_key, Pooled::Reuse)
        .map_err(|e| e.context(context))?;
    match subscribe(&mut sub, channel, timeout) {
        Ok(()) => return Ok(sub),
        Err(e) if sub.reused && is_stale(&e) => client.forget_topology(&e),
        Err(e) => return Err(Error::from_redis(context, e)),
    }
    let mut sub = client
        .checkout_subscriber(node_key, Pooled::Discard)
        .map_err(|e| e.context(context))?;
    subscribe(&mut sub, channel, timeout).map_err(|e| Error::from_redis(context, e))?;
    Ok(sub)
}

/// SUBSCRIBE (in the same write as the UNSUBSCRIBE of a leftover channel),
/// then wait for its confirmation (push frames of earlier, finished waits on
/// this connection are skipped). Signals are deferred meanwhile, as for any
/// round trip (`signals.rs`).
fn subscribe(sub: &mut Subscriber, channel: &[u8], timeout: Duration) -> redis::RedisResult<()> {
    let _signals = crate::signals::Deferred::new();
    let conn = &mut sub.conn;
    conn.set_read_timeout(Some(timeout))?;
    let mut packed = Vec::new();
    if let Some(old) = sub.leftover.take() {
        redis::cmd("UNSUBSCRIBE")
            .arg(old)
            .write_packed_command(&mut packed);
    }
    redis::cmd("SUBSCRIBE")
        .arg(channel)
        .write_packed_command(&mut packed);
    conn.send_packed_command(&packed)?;
    loop {
        if let redis::Value::Push {
            kind: redis::PushKind::Subscribe,
            data,
        } = conn.recv_response()?
            && matches!(data.first(), Some(redis::Value::BulkString(c)) if c == channel)
        {
            return Ok(());
        }
    }
}

/// Waits up to `pause` for a message on `channel`, consulting `interrupt`
/// every [`INTERRUPT_SLICE`]. Returns the payload, or `None` at the end of the
/// pause; only the interrupt hook or a broken connection (its message
/// prefixed with `context`) are errors.
pub(crate) fn listen(
    conn: &mut redis::Connection,
    channel: &[u8],
    pause: Duration,
    interrupt: Option<Interrupt<'_>>,
    context: &str,
) -> Result<Option<Vec<u8>>> {
    let until = Instant::now() + pause;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let slice = match interrupt {
            Some(_) => left.min(INTERRUPT_SLICE),
            None => left,
        };
        conn.set_read_timeout(Some(slice.max(Duration::from_millis(1))))
            .map_err(|e| Error::from_redis(context, e))?;
        match conn.recv_response() {
            Ok(redis::Value::Push {
                kind: redis::PushKind::Message,
                data,
            }) => {
                // Messages for channels of earlier waits on this connection are stale.
                if let [
                    redis::Value::BulkString(c),
                    redis::Value::BulkString(payload),
                ] = data.as_slice()
                    && c == channel
                {
                    return Ok(Some(payload.clone()));
                }
            }
            Ok(_) => {} // (un)subscribe confirmations
            // A slice ended, or a signal interrupted the read (EINTR): the
            // subscription is intact; let the hook decide whether to go on.
            Err(e) if e.is_timeout() || is_eintr(&e) => {
                if let Some(check) = interrupt {
                    check()?;
                }
            }
            Err(e) => return Err(Error::from_redis(context, e)),
        }
    }
}

/// A read interrupted by a signal. The `redis` crate keeps the `io::Error`
/// private, so recognise it by its text (`Interrupted system call (os error 4)`).
fn is_eintr(e: &redis::RedisError) -> bool {
    let eintr = std::io::Error::from(std::io::ErrorKind::Interrupted).to_string();
    e.is_io_error() && (e.to_string().contains("os error 4") || e.to_string().contains(&eintr))
}
