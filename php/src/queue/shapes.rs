//! The arrays the legacy `RedisQueue` answers with: a task as an array
//! (by the method's shape), one or a list, and `false`/`[]` for bad input.

use ext_php_rs::exception::PhpResult;
use ext_php_rs::types::{ZendHashTable, Zval};
use ferrolock::Task;

use crate::args::bytes_zval;

/// What a legacy method returns for bad input: `false` or `[]`.
#[derive(Clone, Copy)]
pub(super) enum Fallback {
    False,
    EmptyArray,
}

impl Fallback {
    pub(super) fn zval(self) -> Zval {
        let mut z = Zval::new();
        match self {
            Fallback::False => z.set_bool(false),
            Fallback::EmptyArray => z.set_hashtable(ZendHashTable::new()),
        }
        z
    }
}

/// What a task array holds besides `id` and `score` (and `payload`, when
/// the task has one).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// The legacy pop/top array.
    Legacy,
    /// A reservation: `receipt`, `attempts`.
    Reserved,
    /// A dead task: `attempts` (its score: when it died).
    Dead,
}

pub(super) fn task_array(task: &Task, shape: Shape) -> PhpResult<Zval> {
    let mut row = ZendHashTable::new();
    row.insert("id", bytes_zval(&task.id))?;
    row.insert("score", task.score)?;
    if shape == Shape::Reserved {
        row.insert("receipt", task.receipt.clone().unwrap_or_default())?;
    }
    if shape != Shape::Legacy {
        row.insert("attempts", i64::from(task.attempts))?;
    }
    if let Some(p) = &task.payload {
        row.insert("payload", bytes_zval(p))?;
    }
    let mut z = Zval::new();
    z.set_hashtable(row);
    Ok(z)
}

/// Legacy shapes: `$count == 1` → one array or false; else a list.
pub(super) fn tasks_zval(tasks: &[Task], count: i64, shape: Shape) -> PhpResult<Zval> {
    if count == 1 {
        return match tasks.first() {
            Some(t) => task_array(t, shape),
            None => Ok(Fallback::False.zval()),
        };
    }
    list_zval(tasks, shape)
}

pub(super) fn list_zval(tasks: &[Task], shape: Shape) -> PhpResult<Zval> {
    let mut list = ZendHashTable::new();
    for t in tasks {
        list.push(task_array(t, shape)?)?;
    }
    let mut z = Zval::new();
    z.set_hashtable(list);
    Ok(z)
}
