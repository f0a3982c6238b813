//! The `$param` of the constructors: where Redis is, plus ferrolock's extras.
//!
//! `null` → ini `ferrolock.url` → `$REDIS_URL` → `redis://127.0.0.1:6379/0`.
//! A string is a URL. An array is the legacy `RedisFactory` form
//! (`host`, `port`, `password`, `database`) plus optional `url`, `username`,
//! `timeout`, `servers` (Redlock: a list of URLs), `fair`, `auto_renew`,
//! `prefix` and `lock_prefix`.

use std::ffi::{CStr, c_char, c_int};

use ext_php_rs::exception::PhpResult;
use ext_php_rs::types::Zval;
use ferrolock::{Client, UrlParts};

use crate::args::{At, exception, type_error, type_name};

unsafe extern "C" {
    // Zend API (not in ext-php-rs' bindings), resolved when PHP loads the extension.
    fn zend_ini_string_ex(
        name: *const c_char,
        len: usize,
        orig: c_int,
        exists: *mut bool,
    ) -> *mut c_char;
}

/// The name of the ini entry holding the default URL.
pub const INI_URL: &str = "ferrolock.url";

/// The current value of `ferrolock.url` (empty when unset).
fn ini_url() -> String {
    let mut exists = false;
    // SAFETY: the name pointer/length describe a valid string; PHP returns a
    // NUL-terminated string owned by the ini table, or NULL.
    let value =
        unsafe { zend_ini_string_ex(INI_URL.as_ptr().cast(), INI_URL.len(), 0, &mut exists) };
    if value.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated, valid for the duration of this call.
    unsafe { CStr::from_ptr(value) }
        .to_string_lossy()
        .into_owned()
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
    /// `prefix` key, if given.
    pub prefix: Option<Vec<u8>>,
    /// `lock_prefix` key, if given (queues).
    pub lock_prefix: Option<Vec<u8>>,
}

fn client(url: &str) -> PhpResult<Client> {
    Client::shared(url).map_err(exception)
}

/// Reads `$param` (see the module documentation).
pub fn settings(param: Option<&Zval>, function: &'static str) -> PhpResult<Settings> {
    let at = At {
        function,
        position: 1,
        name: "param",
    };
    let mut out = Settings {
        client: None,
        servers: Vec::new(),
        fair: false,
        auto_renew: false,
        prefix: None,
        lock_prefix: None,
    };
    let default_url = || {
        let ini = ini_url();
        if ini.trim().is_empty() {
            ferrolock::default_url()
        } else {
            ini
        }
    };
    let param = param.filter(|z| !z.is_null());
    let Some(param) = param else {
        out.client = Some(client(&default_url())?);
        return Ok(out);
    };
    if let Some(url) = param.str() {
        out.client = Some(client(url)?);
        return Ok(out);
    }
    let Some(array) = param.array() else {
        return Err(type_error(&at, "string|array|null", &type_name(param)));
    };
    let mut parts = UrlParts::default();
    let mut url = None;
    for (key, value) in array.iter() {
        let key = key.to_string();
        let text = || value.coerce_to_string().filter(|_| !value.is_array());
        match key.as_str() {
            "url" => url = text(),
            "host" => parts.host = text(),
            "port" => parts.port = value.coerce_to_long().and_then(|p| u16::try_from(p).ok()),
            "username" | "user" => parts.username = text().filter(|s| !s.is_empty()),
            "password" | "auth" | "pass" => parts.password = text().filter(|s| !s.is_empty()),
            "database" | "db" | "dbindex" => parts.db = value.coerce_to_long(),
            "timeout" => parts.timeout = value.coerce_to_double().filter(|t| *t > 0.0),
            "tls" | "ssl" => parts.tls = value.coerce_to_bool(),
            "fair" => out.fair = value.coerce_to_bool(),
            "auto_renew" => out.auto_renew = value.coerce_to_bool(),
            "prefix" => out.prefix = text().map(String::into_bytes),
            "lock_prefix" => out.lock_prefix = text().map(String::into_bytes),
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
                    out.servers.push(client(u)?);
                }
            }
            _ => {} // legacy factory arrays carry other settings (persistent, …)
        }
    }
    let url = match url {
        Some(u) => u,
        // Only options, or settings such as a timeout: the default server.
        None if !parts.names_a_server() => parts.apply_to(&default_url()).map_err(exception)?,
        None => parts.to_url().map_err(exception)?,
    };
    if out.servers.is_empty() {
        out.client = Some(client(&url)?);
    }
    Ok(out)
}
