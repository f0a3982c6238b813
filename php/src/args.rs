//! Argument conversion with PHP's own rules, and the error boundary.
//!
//! ext-php-rs rejects a mismatched scalar with a plain `\Exception` and no
//! coercion; legacy callers pass `"5"` for ints and ints for floats. So the
//! parameters are received as `IntArg`/`FloatArg`/`StrArg`, which declare the
//! PHP type for reflection but accept any value, and are converted here with
//! PHP's coercive-mode rules: a value PHP would reject raises `TypeError`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicPtr, Ordering};

use ext_php_rs::boxed::ZBox;
use ext_php_rs::convert::FromZval;
use ext_php_rs::error::php_error;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::flags::{DataType, ErrorType};
use ext_php_rs::types::{ZendStr, Zval};
use ext_php_rs::zend::{ClassEntry, ce};

// Zend API (not in ext-php-rs' bindings), resolved when PHP loads the
// extension. ZEND_FASTCALL: the C convention, `__vectorcall` on Windows.
#[cfg(not(windows))]
unsafe extern "C" {
    fn zend_double_to_str(num: f64) -> *mut ZendStr;
}
#[cfg(windows)]
unsafe extern "vectorcall" {
    fn zend_double_to_str(num: f64) -> *mut ZendStr;
}

/// `RedisLockException`'s class entry, set at module startup.
pub static LOCK_EXCEPTION: AtomicPtr<ClassEntry> = AtomicPtr::new(std::ptr::null_mut());

/// A `RedisLockException` with `message` (a plain `RuntimeException` if the
/// class is not registered yet, which cannot happen after MINIT).
pub fn lock_exception(message: impl Into<String>) -> PhpException {
    let ce = LOCK_EXCEPTION.load(Ordering::Acquire);
    // SAFETY: the pointer was stored by ClassBuilder::registration and class
    // entries live until module shutdown.
    match unsafe { ce.as_ref() } {
        Some(ce) => PhpException::new(message.into(), 0, ce),
        None => PhpException::default(message.into()),
    }
}

/// Emits an `E_WARNING` (PHP prefixes it with `Class::method(): `).
pub fn warn(message: &str) {
    php_error(&ErrorType::Warning, &message.replace('\0', "\\0"));
}

/// Runs a method body, turning a Rust panic into a `RedisLockException`
/// instead of aborting the PHP process.
pub fn guard<T>(body: impl FnOnce() -> PhpResult<T>) -> PhpResult<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(lock_exception(format!("ferrolock internal error: {what}")))
        }
    }
}

/// Maps a core error: bad arguments become the legacy return value plus an
/// `E_WARNING`; anything about Redis becomes a `RedisLockException`.
pub fn legacy<T>(result: ferrolock::Result<T>, fallback: T) -> PhpResult<T> {
    match result {
        Ok(v) => Ok(v),
        Err(e) if e.is_invalid_argument() => {
            warn(e.message());
            Ok(fallback)
        }
        Err(e) => Err(lock_exception(e.to_string())),
    }
}

/// A core error as a `RedisLockException`.
pub fn exception(e: ferrolock::Error) -> PhpException {
    lock_exception(e.to_string())
}

/// PHP's name of a value's type, as in its own TypeError messages.
pub fn type_name(z: &Zval) -> String {
    match z.get_type() {
        DataType::Null => "null".into(),
        DataType::False | DataType::True | DataType::Bool => "bool".into(),
        DataType::Long => "int".into(),
        DataType::Double => "float".into(),
        DataType::String => "string".into(),
        DataType::Array => "array".into(),
        DataType::Object(_) => z
            .object()
            .and_then(|o| o.get_class_name().ok())
            .unwrap_or_else(|| "object".into()),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Where an argument sits, for TypeError messages.
pub struct At {
    /// `RedisLock::lock`
    pub function: &'static str,
    /// 1-based position.
    pub position: u8,
    /// Parameter name without `$`.
    pub name: &'static str,
}

/// Shorthand for [`At`].
pub const fn at(function: &'static str, position: u8, name: &'static str) -> At {
    At {
        function,
        position,
        name,
    }
}

/// `TypeError: f(): Argument #n ($name) must be of type T, U given`.
pub fn type_error(at: &At, expected: &str, got: &str) -> PhpException {
    PhpException::new(
        format!(
            "{}(): Argument #{} (${}) must be of type {expected}, {got} given",
            at.function, at.position, at.name
        ),
        0,
        ce::type_error(),
    )
}

/// A numeric string as PHP reads it for typed parameters (leading and
/// trailing whitespace allowed, nothing else).
fn numeric(s: &str) -> Option<f64> {
    let t = s.trim_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if t.is_empty() || t.chars().any(|c| c.is_alphabetic() && c != 'e' && c != 'E') {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// An `int` parameter: int, bool, integral-range float, numeric string.
pub struct IntArg(Result<i64, String>);

impl From<i64> for IntArg {
    fn from(v: i64) -> Self {
        IntArg(Ok(v))
    }
}

impl<'a> FromZval<'a> for IntArg {
    const TYPE: DataType = DataType::Long;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        let float_to_int = |f: f64| {
            (f.is_finite() && f >= i64::MIN as f64 && f < i64::MAX as f64).then_some(f as i64)
        };
        let v = if let Some(l) = z.long() {
            Some(l)
        } else if let Some(b) = z.bool() {
            Some(i64::from(b))
        } else if let Some(d) = z.double() {
            float_to_int(d)
        } else if let Some(s) = z.str() {
            s.trim()
                .parse::<i64>()
                .ok()
                .or_else(|| numeric(s).and_then(float_to_int))
        } else {
            None
        };
        Some(IntArg(v.ok_or_else(|| type_name(z))))
    }
}

impl IntArg {
    /// An optional parameter, which also takes `null`: `null` reads as 0, as
    /// the untyped legacy methods read it (`null <= 0`, `$now + null`), so a
    /// legacy wrapper that passes its own `null` default keeps working.
    pub fn or_zero(arg: Option<IntArg>) -> IntArg {
        match arg {
            Some(IntArg(Err(got))) if got == "null" => IntArg(Ok(0)),
            Some(a) => a,
            None => IntArg(Ok(0)),
        }
    }

    /// The value, or PHP's TypeError.
    pub fn get(self, at: &At) -> PhpResult<i64> {
        self.0.map_err(|got| type_error(at, "int", &got))
    }
}

/// An `int|float` / `float` parameter: int, float, bool, numeric string.
pub struct FloatArg(Result<f64, String>);

impl From<f64> for FloatArg {
    fn from(v: f64) -> Self {
        FloatArg(Ok(v))
    }
}

impl From<i64> for FloatArg {
    fn from(v: i64) -> Self {
        FloatArg(Ok(v as f64))
    }
}

impl<'a> FromZval<'a> for FloatArg {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        let v = if let Some(d) = z.double() {
            Some(d)
        } else if let Some(l) = z.long() {
            Some(l as f64)
        } else if let Some(b) = z.bool() {
            Some(if b { 1.0 } else { 0.0 })
        } else if let Some(s) = z.str() {
            numeric(s)
        } else {
            None
        };
        Some(FloatArg(v.ok_or_else(|| type_name(z))))
    }
}

impl FloatArg {
    /// An optional parameter, which also takes `null` (read as 0, see
    /// [`IntArg::or_zero`]).
    pub fn or_zero(arg: Option<FloatArg>) -> FloatArg {
        match arg {
            Some(FloatArg(Err(got))) if got == "null" => FloatArg(Ok(0.0)),
            Some(a) => a,
            None => FloatArg(Ok(0.0)),
        }
    }

    /// The value, or PHP's TypeError (`expected` names the declared type).
    pub fn get(self, at: &At, expected: &str) -> PhpResult<f64> {
        self.0.map_err(|got| type_error(at, expected, &got))
    }
}

/// A wait timeout in seconds, capped at the longest duration the core takes
/// (ten years): a longer wait (`PHP_INT_MAX`, `INF`) means "as long as it
/// takes", not a mistake. NaN and negative values are left for the caller.
pub fn cap_wait(seconds: f64) -> f64 {
    if seconds > ferrolock::validate::MAX_SECONDS {
        ferrolock::validate::MAX_SECONDS
    } else {
        seconds
    }
}

/// A `string` parameter, binary safe: strings as bytes; ints, floats and bools
/// converted as PHP does.
pub struct StrArg(Result<Vec<u8>, String>);

impl<'a> FromZval<'a> for StrArg {
    const TYPE: DataType = DataType::String;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(StrArg(scalar_bytes(z).ok_or_else(|| type_name(z))))
    }
}

impl StrArg {
    /// The bytes, or PHP's TypeError.
    pub fn get(self, at: &At) -> PhpResult<Vec<u8>> {
        self.0.map_err(|got| type_error(at, "string", &got))
    }
}

/// A float as PHP's `(string)` gives it: PHP's own formatting, with the
/// `precision` ini (`0.30000000000000004` → `"0.3"`, `1e20` → `"1.0E+20"`,
/// `INF`, `NAN`, `"-0"`), so a name built here is the key legacy code builds
/// with `"Lock:$name"`.
pub fn float_bytes(value: f64) -> Vec<u8> {
    // SAFETY: zend_double_to_str only reads executor globals (precision) and
    // returns a new, non-null zend_string that we own and release on drop.
    let string: ZBox<ZendStr> = unsafe { ZBox::from_raw(zend_double_to_str(value)) };
    string.as_bytes().to_vec()
}

/// A scalar as PHP's string conversion gives it (`None` for arrays, objects
/// without `__toString`, null).
pub fn scalar_bytes(z: &Zval) -> Option<Vec<u8>> {
    if let Some(s) = z.zend_str() {
        return Some(s.as_bytes().to_vec());
    }
    if let Some(d) = z.double() {
        return Some(float_bytes(d));
    }
    if z.is_null() || z.is_array() {
        return None;
    }
    z.coerce_to_string().map(String::into_bytes)
}

/// A `string|int` id (floats and bools too, converted as PHP would).
pub fn id_bytes(z: &Zval, at: &At) -> PhpResult<Vec<u8>> {
    scalar_bytes(z).ok_or_else(|| type_error(at, "string|int", &type_name(z)))
}

/// A PHP string zval from bytes.
pub fn bytes_zval(bytes: &[u8]) -> Zval {
    let mut z = Zval::new();
    z.set_binary(bytes.to_vec());
    z
}
