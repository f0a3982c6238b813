//! The modern classes: `Ferrolock\Lock`, `Ferrolock\Queue`, `Ferrolock\Task`,
//! with the semantics of the Python package's `Lock`, `Queue` and `Task`.
//!
//! Their settings come as named arguments or in an `$options` array (or
//! both, each setting once), read here; bad values are `\ValueError`s, wrong
//! types `\TypeError`s, failures the `Ferrolock\…Exception`s (`errors.rs`).

mod enqueue;
pub mod lock;
mod params;
pub mod queue;
pub mod task;

use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::types::Zval;
use ferrolock::Client;

use crate::args::{At, bool_of, number_of, scalar_bytes, type_error, type_name};
use crate::connect::{self, Policy};
use crate::errors::value_error;

/// One setting, as given by a named argument or an `$options` key.
pub enum Value {
    /// `int|float` seconds.
    Number(f64),
    /// `bool`.
    Bool(bool),
    /// `string` (bytes).
    Bytes(Vec<u8>),
    /// `int`.
    Int(i64),
    /// `?int` where null is a value of its own (`maxAttempts`: unlimited).
    IntOrNull(Option<i64>),
    /// `string|array` (a connection).
    Zval(Zval),
}

/// The kind of value a setting takes.
#[derive(Clone, Copy)]
pub enum Kind {
    /// `int|float`.
    Number,
    /// `bool`.
    Bool,
    /// `string`.
    Bytes,
    /// `int`.
    Int,
    /// `?int` where null is a value of its own, not "not set"
    /// (`maxAttempts`: null is unlimited).
    IntOrNull,
    /// `string|array`: a URL or a connection array.
    Connection,
}

/// The settings of one constructor call: the names it knows (with their
/// kinds and the option keys that spell them) and the values given.
pub struct Settings {
    function: &'static str,
    known: &'static [(&'static str, Kind, &'static [&'static str])],
    values: Vec<Option<Value>>,
}

impl Settings {
    /// No setting given yet for `function` (`Ferrolock\Lock::__construct`),
    /// which knows `known`: (argument name, kind, other option keys).
    pub fn new(
        function: &'static str,
        known: &'static [(&'static str, Kind, &'static [&'static str])],
    ) -> Self {
        Self {
            function,
            known,
            values: known.iter().map(|_| None).collect(),
        }
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.known
            .iter()
            .position(|(n, _, aliases)| *n == name || aliases.contains(&name))
    }

    /// A named argument (already converted), if given.
    pub fn arg(&mut self, name: &str, value: Option<Value>) {
        if let (Some(i), Some(v)) = (self.index(name), value) {
            self.values[i] = Some(v);
        }
    }

    /// The `$options` array at `at`, if given: each key a known setting not
    /// also given as an argument.
    pub fn options(&mut self, at: &At, options: Option<&Zval>) -> PhpResult<()> {
        let Some(options) = options.map(Zval::dereference).filter(|z| !z.is_null()) else {
            return Ok(());
        };
        let Some(array) = options.array() else {
            return Err(type_error(at, "?array", &type_name(options)));
        };
        for (key, value) in array.iter() {
            let key = key.to_string();
            let value = value.dereference();
            let Some(i) = self.index(&key) else {
                let names: Vec<&str> = self.known.iter().map(|(n, _, _)| *n).collect();
                return Err(value_error(format!(
                    "{at}: unknown option {key:?} (known: {})",
                    names.join(", ")
                )));
            };
            let (name, kind, _) = self.known[i];
            if self.values[i].is_some() {
                return Err(value_error(format!(
                    "{at}: '{name}' is given twice, in $options and as the argument ${name}"
                )));
            }
            if value.is_null() {
                if let Kind::IntOrNull = kind {
                    self.values[i] = Some(Value::IntOrNull(None));
                }
                continue; // null: not set, as for the arguments
            }
            let wrong = |expected: &str| {
                type_error(
                    at,
                    &format!("array with '{key}' => {expected}"),
                    &type_name(value),
                )
            };
            self.values[i] = Some(match kind {
                Kind::Number => Value::Number(number_of(value).map_err(|_| wrong("int|float"))?),
                Kind::Bool => Value::Bool(bool_of(value).map_err(|_| wrong("bool"))?),
                Kind::Bytes => Value::Bytes(scalar_bytes(value).ok_or_else(|| wrong("string"))?),
                Kind::Int | Kind::IntOrNull => {
                    let expected = match kind {
                        Kind::Int => "int",
                        _ => "?int",
                    };
                    let n = number_of(value).map_err(|_| wrong(expected))?;
                    if n.fract() != 0.0 || !n.is_finite() {
                        return Err(wrong(expected));
                    }
                    match kind {
                        Kind::Int => Value::Int(n as i64),
                        _ => Value::IntOrNull(Some(n as i64)),
                    }
                }
                Kind::Connection => {
                    if !(value.is_string() || value.is_array()) {
                        return Err(wrong("string|array"));
                    }
                    Value::Zval(value.shallow_clone())
                }
            });
        }
        Ok(())
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        self.index(name).and_then(|i| self.values[i].take())
    }

    /// The number given for `name`.
    pub fn number(&mut self, name: &str) -> Option<f64> {
        match self.take(name) {
            Some(Value::Number(v)) => Some(v),
            _ => None,
        }
    }

    /// The bool given for `name`.
    pub fn boolean(&mut self, name: &str) -> Option<bool> {
        match self.take(name) {
            Some(Value::Bool(v)) => Some(v),
            _ => None,
        }
    }

    /// The string given for `name`.
    pub fn bytes(&mut self, name: &str) -> Option<Vec<u8>> {
        match self.take(name) {
            Some(Value::Bytes(v)) => Some(v),
            _ => None,
        }
    }

    /// The int given for `name`.
    pub fn int(&mut self, name: &str) -> Option<i64> {
        match self.take(name) {
            Some(Value::Int(v)) => Some(v),
            _ => None,
        }
    }

    /// The `?int` given for `name`: `Some(None)` for null.
    pub fn int_or_null(&mut self, name: &str) -> Option<Option<i64>> {
        match self.take(name) {
            Some(Value::IntOrNull(v)) => Some(v),
            _ => None,
        }
    }

    /// `what(): ` for messages: the method as PHP names it.
    pub fn what(&self) -> String {
        format!("{}()", self.function)
    }

    /// The server: `connection` (a URL or a connection array) or `url`, at
    /// most one of them; else the default (ini `ferrolock.url`, `$REDIS_URL`,
    /// `redis://127.0.0.1:6379/0`). Redlock's `servers` is refused.
    pub fn client(&mut self, at: At, policy: Policy) -> PhpResult<Client> {
        let connection = match self.take("connection") {
            Some(Value::Zval(z)) => Some(z),
            _ => None,
        };
        let url = self.bytes("url");
        let mut z = Zval::new();
        let param = match (connection, url) {
            (Some(_), Some(_)) => {
                return Err(value_error(format!(
                    "{}: give the server as 'connection' or as 'url', not both",
                    self.what()
                )));
            }
            (Some(c), None) => Some(c),
            (None, Some(u)) => {
                z.set_binary(u);
                Some(z)
            }
            (None, None) => None,
        };
        let s = connect::read(at, param.as_ref(), policy)?;
        if !s.servers.is_empty() {
            return Err(value_error(format!(
                "{}: 'servers' (Redlock over several masters) is not available here; RedisLock takes it",
                self.what()
            )));
        }
        s.client
            .ok_or_else(|| value_error(format!("{}: no Redis server given", self.what())))
    }
}

/// `Some(Value::Number)` from an optional number argument.
pub fn number(v: Option<f64>) -> Option<Value> {
    v.map(Value::Number)
}

/// `Some(Value::Bool)` from an optional bool argument.
pub fn boolean(v: Option<bool>) -> Option<Value> {
    v.map(Value::Bool)
}

/// `Some(Value::Bytes)` from an optional string argument.
pub fn bytes(v: Option<Vec<u8>>) -> Option<Value> {
    v.map(Value::Bytes)
}

/// A connection argument (`string|array|null`) at `at`.
pub fn connection_value(at: &At, z: Option<&Zval>) -> PhpResult<Option<Value>> {
    let Some(z) = z.map(Zval::dereference).filter(|z| !z.is_null()) else {
        return Ok(None);
    };
    if z.is_string() || z.is_array() {
        Ok(Some(Value::Zval(z.shallow_clone())))
    } else {
        Err(type_error(at, "string|array|null", &type_name(z)))
    }
}

/// A `\ValueError` for a core error about `function`'s arguments.
pub fn invalid(function: &str, e: ferrolock::Error) -> PhpException {
    crate::errors::modern(&format!("{function}()"), e)
}
