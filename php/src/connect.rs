//! The `$param` of the constructors: where Redis is, plus ferrolock's extras.
//!
//! `null` → ini `ferrolock.url` → `$REDIS_URL` → `redis://127.0.0.1:6379/0`.
//! A string is a URL. An array is the legacy `RedisFactory` form
//! (`host`, `port`, `password`, `database`) plus optional `url`, `username`,
//! `timeout`, `servers` (Redlock: a list of URLs), `fair`, `auto_renew`,
//! `min_replicas`, `prefix` and `lock_prefix`.

use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::types::Zval;
use ferrolock::{Client, UrlParts};

use crate::args::{Args, scalar_bytes, type_error, type_name};
use crate::errors::{exception, lock_exception};

/// The name of the ini entry holding the default URL.
pub const INI_URL: &str = "ferrolock.url";

/// The current value of `ferrolock.url` (empty when unset).
fn ini_url() -> String {
    crate::legacy::ini_string(INI_URL)
}

/// Everything a constructor's `$param` can say.
pub struct Settings {
    /// The Redis deployment (one URL).
    pub client: Option<Client>,
    /// Redlock masters (`servers`), when given.
    pub servers: Vec<Client>,
    /// Fair locks.
    pub fair: bool,
    /// Renew held locks in the background.
    pub auto_renew: bool,
    /// Confirm each acquire on this many replicas (`WAIT`).
    pub min_replicas: u32,
    /// Legacy pollers' turns (`legacy_interop`; `None`: as the prefix says).
    pub legacy_interop: Option<bool>,
    /// `prefix` key, if given.
    pub prefix: Option<Vec<u8>>,
    /// `lock_prefix` key, if given (queues).
    pub lock_prefix: Option<Vec<u8>>,
}

/// How the settings' errors are reported: the legacy classes throw
/// `RedisLockException` for every connection problem; the modern ones
/// `\ValueError` for a bad setting, `Ferrolock\ConnectionException` for an
/// unreachable server (see `errors::modern`).
#[derive(Clone, Copy)]
pub enum Policy {
    /// `RedisLock`, `RedisQueue`.
    Legacy,
    /// `Ferrolock\Lock`, `Ferrolock\Queue`: the method and parameter, as
    /// `Ferrolock\Lock::__construct(): Argument #3 ($connection)`.
    Modern(&'static str),
}

impl Policy {
    fn error(self, e: ferrolock::Error) -> PhpException {
        match self {
            Policy::Legacy => exception(e),
            Policy::Modern(what) => crate::errors::modern(what, e),
        }
    }

    /// A setting of the connection array that cannot be used.
    fn bad(self, message: String) -> PhpException {
        match self {
            Policy::Legacy => lock_exception(message),
            Policy::Modern(what) => crate::errors::value_error(format!("{what}: {message}")),
        }
    }

    fn client(self, url: &str) -> PhpResult<Client> {
        Client::shared(url).map_err(|e| self.error(e))
    }
}

/// The server named by the ini `ferrolock.url`, else `$REDIS_URL`, else the
/// default URL.
pub fn default_url() -> String {
    let ini = ini_url();
    if ini.trim().is_empty() {
        ferrolock::default_url()
    } else {
        ini
    }
}

// Values of the connection array. A value that would otherwise be dropped or
// replaced (and so connect to another server or database than the caller
// named) is refused (`RedisLockException`), as a bad URL is; `null` means
// "not set".

/// `connection array: 'port' must be …, got …` (a secret's value is not shown).
fn bad_value(key: &str, allowed: &str, value: &Zval, secret: bool) -> String {
    let got = if secret {
        type_name(value)
    } else if let Some(s) = value.zend_str() {
        let s = String::from_utf8_lossy(s.as_bytes());
        let short: String = s.chars().take(64).collect();
        let more = if short.len() < s.len() { "…" } else { "" };
        format!("{short:?}{more}")
    } else if let Some(b) = value.bool() {
        b.to_string()
    } else if value.is_long() || value.is_double() {
        scalar_bytes(value)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|| type_name(value))
    } else {
        type_name(value)
    };
    format!("connection array: '{key}' must be {allowed}, got {got}")
}

/// A string setting (ints and floats converted as PHP does).
fn text(key: &str, value: &Zval, secret: bool) -> Result<Option<String>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let allowed = "a string";
    if !(value.is_string() || value.is_long() || value.is_double()) {
        return Err(bad_value(key, allowed, value, secret));
    }
    let bytes = scalar_bytes(value).ok_or_else(|| bad_value(key, allowed, value, secret))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| bad_value(key, "a UTF-8 string", value, secret))
}

/// A binary-safe string setting (key prefixes).
fn bytes(key: &str, value: &Zval) -> Result<Option<Vec<u8>>, String> {
    if value.is_null() {
        return Ok(None);
    }
    if !(value.is_string() || value.is_long() || value.is_double()) {
        return Err(bad_value(key, "a string", value, false));
    }
    scalar_bytes(value)
        .map(Some)
        .ok_or_else(|| bad_value(key, "a string", value, false))
}

/// An integer setting: an int, an integral float or an integer string
/// (`'6380'`, surrounding whitespace allowed).
fn integer(value: &Zval) -> Option<i64> {
    if let Some(l) = value.long() {
        Some(l)
    } else if let Some(d) = value.double() {
        (d.is_finite() && d.fract() == 0.0 && d >= i64::MIN as f64 && d < i64::MAX as f64)
            .then_some(d as i64)
    } else if let Some(s) = value.zend_str() {
        std::str::from_utf8(s.as_bytes())
            .ok()?
            .trim_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
            .parse()
            .ok()
    } else {
        None
    }
}

/// `port`: 1 to 65535.
fn port(key: &str, value: &Zval) -> Result<Option<u16>, String> {
    if value.is_null() {
        return Ok(None);
    }
    integer(value)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .map(Some)
        .ok_or_else(|| bad_value(key, "an integer from 1 to 65535", value, false))
}

/// `min_replicas`: a replica count, 0 or more (`null`: 0).
fn replicas(key: &str, value: &Zval) -> Result<u32, String> {
    if value.is_null() {
        return Ok(0);
    }
    integer(value)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad_value(key, "an integer >= 0 (a replica count)", value, false))
}

/// `database`: a database number, 0 or more.
fn database(key: &str, value: &Zval) -> Result<Option<i64>, String> {
    if value.is_null() {
        return Ok(None);
    }
    integer(value)
        .filter(|db| *db >= 0)
        .map(Some)
        .ok_or_else(|| bad_value(key, "an integer >= 0 (a database number)", value, false))
}

/// `timeout`: seconds, a finite number >= 0 (0: the default timeout).
fn timeout(key: &str, value: &Zval) -> Result<Option<f64>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let t = if let Some(d) = value.double() {
        Some(d)
    } else if let Some(l) = value.long() {
        Some(l as f64)
    } else if let Some(s) = value.zend_str() {
        std::str::from_utf8(s.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
    } else {
        None
    };
    match t {
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(t)),
        Some(0.0) => Ok(None),
        _ => Err(bad_value(
            key,
            "a finite number of seconds >= 0 (0: the default)",
            value,
            false,
        )),
    }
}

/// Reads `$param`, the only parameter of `function`, a legacy constructor
/// (see the module documentation).
pub fn settings(function: &'static str, param: Option<&Zval>) -> PhpResult<Settings> {
    read(Args::new(function).at("param"), param, Policy::Legacy)
}

/// Reads a connection (a URL, a connection array, or null) at `at`, reporting
/// problems as `policy` says.
pub fn read(at: crate::args::At, param: Option<&Zval>, policy: Policy) -> PhpResult<Settings> {
    let mut out = Settings {
        client: None,
        servers: Vec::new(),
        fair: false,
        auto_renew: false,
        min_replicas: 0,
        legacy_interop: None,
        prefix: None,
        lock_prefix: None,
    };
    let param = param.map(Zval::dereference).filter(|z| !z.is_null());
    let Some(param) = param else {
        out.client = Some(policy.client(&default_url())?);
        return Ok(out);
    };
    if let Some(url) = param.str() {
        out.client = Some(policy.client(url)?);
        return Ok(out);
    }
    let Some(array) = param.array() else {
        return Err(type_error(&at, "string|array|null", &type_name(param)));
    };
    let mut parts = UrlParts::default();
    let mut url = None;
    let mut located = Vec::new(); // 'host', 'port': where the server is
    for (key, value) in array.iter() {
        let key = key.to_string();
        let key = key.as_str();
        // A value held by reference (`'host' => &$host`, or left so by
        // `foreach ($config as &$v)`) counts as the value it refers to.
        let value = value.dereference();
        let set = |r: Result<(), String>| r.map_err(|m| policy.bad(m));
        match key {
            // Secret: a URL may carry a password.
            "url" => set(text(key, value, true).map(|v| url = v))?,
            "host" => {
                set(text(key, value, false).map(|v| parts.host = v))?;
                if parts.host.is_some() {
                    located.push(key.to_owned());
                }
            }
            "port" => {
                set(port(key, value).map(|v| parts.port = v))?;
                if parts.port.is_some() {
                    located.push(key.to_owned());
                }
            }
            "username" | "user" => {
                set(text(key, value, false).map(|v| parts.username = v.filter(|s| !s.is_empty())))?
            }
            "password" | "auth" | "pass" => {
                set(text(key, value, true).map(|v| parts.password = v.filter(|s| !s.is_empty())))?
            }
            "database" | "db" | "dbindex" => set(database(key, value).map(|v| parts.db = v))?,
            "timeout" => set(timeout(key, value).map(|v| parts.timeout = v))?,
            "tls" | "ssl" => parts.tls = value.coerce_to_bool(),
            "fair" => out.fair = value.coerce_to_bool(),
            "auto_renew" => out.auto_renew = value.coerce_to_bool(),
            "min_replicas" => set(replicas(key, value).map(|v| out.min_replicas = v))?,
            // null: the default (on for the prefix `Lock:`).
            "legacy_interop" => {
                out.legacy_interop = (!value.is_null()).then(|| value.coerce_to_bool())
            }
            "prefix" => set(bytes(key, value).map(|v| out.prefix = v))?,
            "lock_prefix" => set(bytes(key, value).map(|v| out.lock_prefix = v))?,
            "servers" => {
                let Some(list) = value.array() else {
                    return Err(type_error(
                        &at,
                        "array with 'servers' => list of URLs",
                        &type_name(value),
                    ));
                };
                for (_, server) in list.iter() {
                    let Some(u) = server.str() else {
                        return Err(type_error(
                            &at,
                            "array with 'servers' => list of URL strings",
                            &type_name(server),
                        ));
                    };
                    out.servers.push(policy.client(u)?);
                }
            }
            _ => {} // legacy factory arrays carry other settings (persistent, …)
        }
    }
    let url = match url {
        // The other settings apply to the URL (issue 18.4); a host or port
        // besides it would name a second server.
        Some(_) if !located.is_empty() => {
            return Err(policy.bad(format!(
                "connection array: 'url' cannot be combined with '{}': put the server in the URL",
                located.join("', '")
            )));
        }
        Some(u) => parts
            .apply_to(&u)
            .map_err(|e| policy.bad(format!("connection array: {}", e.message())))?,
        // Only options, or settings such as a timeout: the default server.
        None if !parts.names_a_server() => parts
            .apply_to(&default_url())
            .map_err(|e| policy.bad(format!("connection array: {}", e.message())))?,
        None => parts.to_url().map_err(|e| policy.error(e))?,
    };
    if out.servers.is_empty() {
        out.client = Some(policy.client(&url)?);
    }
    Ok(out)
}
