//! Reading the replies of the queue scripts.

use std::time::Duration;

use redis::Value;

use super::task::{Mode, Task};
use crate::error::{Error, ErrorKind, Result};

/// What a take (pop/reserve) attempt found.
pub(super) enum Taken {
    Tasks(Vec<Task>),
    /// Nothing due; work may appear on its own after this long.
    Empty(Option<Duration>),
}

/// The integer at `i` of a script's reply (0 if there is none).
pub(super) fn int_at(reply: &[Value], i: usize) -> i64 {
    match reply.get(i) {
        Some(Value::Int(n)) => *n,
        _ => 0,
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn float(v: &Value) -> Result<f64> {
    bytes(v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Redis,
                format!("unexpected score in reply: {v:?}"),
            )
        })
}

pub(super) fn parse_pairs(items: &[Value]) -> Result<Vec<Task>> {
    items
        .chunks_exact(2)
        .map(|pair| {
            Ok(Task {
                id: bytes(&pair[0])
                    .ok_or_else(|| Error::new(ErrorKind::Redis, "unexpected task id in reply"))?
                    .to_vec(),
                score: float(&pair[1])?,
                receipt: None,
                deadline: None,
            })
        })
        .collect()
}

pub(super) fn parse_take(reply: &[Value], mode: Mode) -> Result<Taken> {
    match (int_at(reply, 0), reply.get(1)) {
        (1, Some(Value::Array(items))) if mode == Mode::Reserve => {
            let id = items.first().and_then(bytes).unwrap_or_default().to_vec();
            let score = float(items.get(1).unwrap_or(&Value::Nil))?;
            let receipt = items
                .get(2)
                .and_then(bytes)
                .map(|b| String::from_utf8_lossy(b).into_owned());
            let deadline = items.get(3).map(float).transpose()?;
            Ok(Taken::Tasks(vec![Task {
                id,
                score,
                receipt,
                deadline,
            }]))
        }
        (1, Some(Value::Array(items))) => Ok(Taken::Tasks(parse_pairs(items)?)),
        (0, next) => {
            let next = next.and_then(bytes).filter(|b| !b.is_empty());
            let hint = match (next, reply.get(2)) {
                (Some(_), Some(now)) => {
                    let next = float(reply.get(1).unwrap_or(&Value::Nil))?;
                    let now = float(now)?;
                    Some(
                        Duration::from_secs_f64((next - now).clamp(0.0, 1e6))
                            + Duration::from_millis(1),
                    )
                }
                _ => None,
            };
            Ok(Taken::Empty(hint))
        }
        _ => Err(Error::new(
            ErrorKind::Redis,
            format!("unexpected reply: {reply:?}"),
        )),
    }
}
