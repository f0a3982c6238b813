//! Reading the replies of the queue scripts.

use std::time::{Duration, Instant};

use redis::Value;

use super::receipt;
use super::task::Task;
use crate::error::{Error, ErrorKind, Result};

/// What a take (pop/reserve) attempt found, and what the finish it carried
/// answered (-1: it carried none).
pub(super) enum Taken {
    Tasks(Vec<Task>, i64),
    /// Nothing due; work may appear on its own after this long.
    Empty(Option<Duration>, i64),
}

impl Taken {
    /// What the finish it carried answered (-1: none).
    pub(super) fn finish_code(&self) -> i64 {
        match self {
            Taken::Tasks(_, f) | Taken::Empty(_, f) => *f,
        }
    }
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

pub(super) fn float(v: &Value) -> Result<f64> {
    bytes(v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| unexpected("number", v))
}

fn unexpected(what: &str, v: &Value) -> Error {
    Error::new(
        ErrorKind::Redis,
        format!("unexpected {what} in reply: {v:?}"),
    )
}

/// A count in a reply: an integer, or its text (HMGET of attempts).
fn count(v: &Value) -> u32 {
    match v {
        Value::Int(n) => u32::try_from(*n).unwrap_or(0),
        other => bytes(other)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    }
}

/// Tasks from the scripts' three lists: `{id, score, ...}`, payloads and
/// attempts (each a list parallel to the ids, or 0: none at all).
pub(super) fn parse_tasks(items: &Value, payloads: &Value, attempts: &Value) -> Result<Vec<Task>> {
    let Value::Array(items) = items else {
        return Err(unexpected("task list", items));
    };
    let list = |v: &Value| match v {
        Value::Array(a) => Some(a.clone()),
        _ => None,
    };
    let (payloads, attempts) = (list(payloads), list(attempts));
    items
        .chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| {
            let id = bytes(&pair[0])
                .ok_or_else(|| unexpected("task id", &pair[0]))?
                .to_vec();
            let mut task = Task::new(id, float(&pair[1])?);
            if let Some(p) = payloads.as_ref().and_then(|p| p.get(i)).and_then(bytes) {
                task.payload = Some(p.to_vec());
            }
            if let Some(a) = attempts.as_ref().and_then(|a| a.get(i)) {
                task.attempts = count(a);
            }
            Ok(task)
        })
        .collect()
}

/// A take's reply. Reserved tasks get their receipts from `rid`, their
/// visibility and the time the request was `sent`.
pub(super) fn parse_take(
    reply: &[Value],
    reserved: Option<(&str, Duration, Instant)>,
) -> Result<Taken> {
    let code = int_at(reply, 0);
    let finished = int_at(reply, if code == 3 { 6 } else { 5 });
    match code {
        3 => {
            // One task, flat: {3, id, score, payload, attempts, deadline, finished}.
            let none = Value::Nil;
            let at = |i: usize| reply.get(i).unwrap_or(&none);
            let id = bytes(at(1)).ok_or_else(|| unexpected("task id", at(1)))?;
            let mut task = Task::new(id.to_vec(), float(at(2))?);
            task.payload = bytes(at(3)).map(<[u8]>::to_vec);
            task.attempts = count(at(4));
            if let Some((rid, visibility, sent)) = reserved {
                task.receipt = Some(receipt::make(rid, &task.id));
                task.deadline = Some(float(at(5))?);
                task.visibility = Some(visibility);
                task.sent = Some(sent);
            }
            Ok(Taken::Tasks(vec![task], finished))
        }
        1 => {
            let none = Value::Int(0);
            let at = |i: usize| reply.get(i).unwrap_or(&none);
            let mut tasks = parse_tasks(at(1), at(2), at(3))?;
            if let Some((rid, visibility, sent)) = reserved {
                let deadline = float(at(4))?;
                for t in &mut tasks {
                    t.receipt = Some(receipt::make(rid, &t.id));
                    t.deadline = Some(deadline);
                    t.visibility = Some(visibility);
                    t.sent = Some(sent);
                }
            }
            Ok(Taken::Tasks(tasks, finished))
        }
        0 => {
            let next = reply.get(1).and_then(bytes).filter(|b| !b.is_empty());
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
            Ok(Taken::Empty(hint, finished))
        }
        _ => Err(Error::new(
            ErrorKind::Redis,
            format!("unexpected reply: {reply:?}"),
        )),
    }
}
