//! Reading a method's arguments with PHP's own rules.
//!
//! ext-php-rs rejects a mismatched scalar with a plain `\Exception` and no
//! coercion; legacy callers pass `"5"` for ints and ints for floats. So the
//! parameters are received as `IntArg`/`FloatArg`/`NumArg`/`StrArg`/`IdArg`/
//! `IdsArg`, which declare the PHP type for reflection but accept any value,
//! and are converted here with PHP's coercive-mode rules: a value PHP would
//! reject raises `TypeError`.
//!
//! A method reads all its parameters first, in declaration order, with
//! [`read_args!`], which numbers the positions and takes each name from its
//! identifier: `read_args!("RedisLock::lock", name, timeout, expire)` gives
//! `RedisLock::lock(): Argument #3 ($expire) must be of type int, array given`
//! with nobody counting.

use ext_php_rs::boxed::ZBox;
use ext_php_rs::convert::FromZval;
use ext_php_rs::exception::{PhpException, PhpResult};
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ZendStr, Zval};
use ext_php_rs::zend::ce;

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

/// Reads the parameters of one method call, in declaration order, shadowing
/// each with its converted value (a `TypeError` naming the first bad one
/// returns from the enclosing closure):
/// `read_args!("RedisQueue::pop", name, count, timeout);`.
macro_rules! read_args {
    ($function:expr, $($param:ident),+ $(,)?) => {
        let mut args = $crate::args::Args::new($function);
        $(let $param = args.read(stringify!($param), $param)?;)+
    };
}
pub(crate) use read_args;

/// The position of the next parameter of a method call.
pub struct Args {
    function: &'static str,
    position: u8,
}

impl Args {
    /// Before the first parameter of `function` (`RedisLock::lock`).
    pub fn new(function: &'static str) -> Self {
        Self {
            function,
            position: 0,
        }
    }

    /// Where the next parameter, `name`, sits.
    pub fn at(&mut self, name: &'static str) -> At {
        self.position += 1;
        At {
            function: self.function,
            position: self.position,
            name,
        }
    }

    /// Converts the next parameter, `name`.
    pub fn read<P: Param>(&mut self, name: &'static str, param: P) -> PhpResult<P::Value> {
        param.read(&self.at(name))
    }
}

/// A parameter as received, converted when read.
pub trait Param {
    /// The converted value.
    type Value;
    /// The value, or PHP's `TypeError` for the parameter at `at`.
    fn read(self, at: &At) -> PhpResult<Self::Value>;
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

/// `TypeError: f(): Argument #n ($name) must be of type T, U given`.
pub fn type_error(at: &At, expected: &str, got: &str) -> PhpException {
    PhpException::new(
        format!("{at} must be of type {expected}, {got} given"),
        0,
        ce::type_error(),
    )
}

/// `f(): Argument #n ($name)`, the method named as PHP shows it.
impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}(): Argument #{} (${})",
            crate::legacy::qualify(self.function),
            self.position,
            self.name
        )
    }
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

/// `null` given for an optional numeric parameter reads as 0, as the untyped
/// legacy methods read it (`null <= 0`, `$now + null`), so a legacy wrapper
/// that passes its own `null` default keeps working.
fn null_as_zero<T: Default>(value: Result<T, String>) -> Result<T, String> {
    match value {
        Err(got) if got == "null" => Ok(T::default()),
        other => other,
    }
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

impl Param for IntArg {
    type Value = i64;
    fn read(self, at: &At) -> PhpResult<i64> {
        self.0.map_err(|got| type_error(at, "int", &got))
    }
}

/// An optional `int` parameter: also `null`, read as 0.
impl Param for Option<IntArg> {
    type Value = i64;
    fn read(self, at: &At) -> PhpResult<i64> {
        IntArg(self.map_or(Ok(0), |a| null_as_zero(a.0))).read(at)
    }
}

/// A float as PHP reads one for a `float` or `int|float` parameter: int,
/// float, bool, numeric string.
fn float_of(z: &Zval) -> Result<f64, String> {
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
    v.ok_or_else(|| type_name(z))
}

/// A `float` parameter.
pub struct FloatArg(Result<f64, String>);

impl<'a> FromZval<'a> for FloatArg {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(FloatArg(float_of(z)))
    }
}

impl Param for FloatArg {
    type Value = f64;
    fn read(self, at: &At) -> PhpResult<f64> {
        self.0.map_err(|got| type_error(at, "float", &got))
    }
}

/// An `int|float` parameter (seconds): the same values as `float`.
pub struct NumArg(Result<f64, String>);

impl From<i64> for NumArg {
    fn from(v: i64) -> Self {
        NumArg(Ok(v as f64))
    }
}

impl<'a> FromZval<'a> for NumArg {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(NumArg(float_of(z)))
    }
}

impl Param for NumArg {
    type Value = f64;
    fn read(self, at: &At) -> PhpResult<f64> {
        self.0.map_err(|got| type_error(at, "int|float", &got))
    }
}

/// An optional `int|float` parameter: also `null`, read as 0.
impl Param for Option<NumArg> {
    type Value = f64;
    fn read(self, at: &At) -> PhpResult<f64> {
        NumArg(self.map_or(Ok(0.0), |a| null_as_zero(a.0))).read(at)
    }
}

/// A wait timeout in seconds, capped at the longest duration the core takes
/// (ten years): a longer finite wait (`PHP_INT_MAX`, `1e300`) means "as long
/// as it takes", not a mistake. NaN, infinities and negative values are left
/// for the caller (to refuse: issue 26.5).
pub fn cap_wait(seconds: f64) -> f64 {
    if seconds.is_finite() && seconds > ferrolock::validate::MAX_SECONDS {
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

impl Param for StrArg {
    type Value = Vec<u8>;
    fn read(self, at: &At) -> PhpResult<Vec<u8>> {
        self.0.map_err(|got| type_error(at, "string", &got))
    }
}

/// A `string|int` task id (floats and bools too, converted as PHP would).
pub struct IdArg(Result<Vec<u8>, String>);

impl IdArg {
    fn of(z: &Zval) -> Self {
        IdArg(scalar_bytes(z).ok_or_else(|| type_name(z)))
    }
}

impl<'a> FromZval<'a> for IdArg {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(IdArg::of(z))
    }
}

impl Param for IdArg {
    type Value = Vec<u8>;
    fn read(self, at: &At) -> PhpResult<Vec<u8>> {
        self.0.map_err(|got| type_error(at, "string|int", &got))
    }
}

/// A `string|int|array` of task ids: one id, or an array whose every element
/// is one.
pub struct IdsArg(Result<Vec<IdArg>, String>);

impl<'a> FromZval<'a> for IdsArg {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        let ids = if z.is_null() || z.is_bool() || z.is_object() {
            Err(type_name(z))
        } else if let Some(list) = z.array() {
            Ok(list.iter().map(|(_, v)| IdArg::of(v)).collect())
        } else {
            Ok(vec![IdArg::of(z)])
        };
        Some(IdsArg(ids))
    }
}

impl Param for IdsArg {
    type Value = Vec<Vec<u8>>;
    fn read(self, at: &At) -> PhpResult<Vec<Vec<u8>>> {
        let ids = self
            .0
            .map_err(|got| type_error(at, "array|string|int", &got))?;
        ids.into_iter().map(|id| id.read(at)).collect()
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

/// A PHP string zval from bytes.
pub fn bytes_zval(bytes: &[u8]) -> Zval {
    let mut z = Zval::new();
    z.set_binary(bytes.to_vec());
    z
}

/// An optional `int|float` parameter of the modern classes: `null` (or
/// omitted) is `None`, "the default".
pub struct OptNum(Option<Result<f64, String>>);

impl From<i64> for OptNum {
    fn from(v: i64) -> Self {
        OptNum(Some(Ok(v as f64)))
    }
}

impl<'a> FromZval<'a> for OptNum {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(OptNum((!z.is_null()).then(|| float_of(z))))
    }
}

impl Param for Option<OptNum> {
    type Value = Option<f64>;
    fn read(self, at: &At) -> PhpResult<Option<f64>> {
        match self.and_then(|a| a.0) {
            None => Ok(None),
            Some(v) => v
                .map(Some)
                .map_err(|got| type_error(at, "int|float|null", &got)),
        }
    }
}

/// A boolean as PHP coerces one for a `bool` parameter: bools, ints, floats
/// and strings (by their truth value); `Err(type)` for anything else.
pub fn bool_of(z: &Zval) -> Result<bool, String> {
    if z.is_bool() || z.is_long() || z.is_double() || z.is_string() {
        Ok(z.coerce_to_bool())
    } else {
        Err(type_name(z))
    }
}

/// An optional `bool` parameter of the modern classes (`null`: the default).
pub struct OptBool(Option<Result<bool, String>>);

impl<'a> FromZval<'a> for OptBool {
    const TYPE: DataType = DataType::Bool;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(OptBool((!z.is_null()).then(|| bool_of(z))))
    }
}

impl Param for Option<OptBool> {
    type Value = Option<bool>;
    fn read(self, at: &At) -> PhpResult<Option<bool>> {
        match self.and_then(|a| a.0) {
            None => Ok(None),
            Some(v) => v.map(Some).map_err(|got| type_error(at, "?bool", &got)),
        }
    }
}

/// An optional `string` parameter of the modern classes (`null`: the default).
pub struct OptStr(Option<Result<Vec<u8>, String>>);

impl<'a> FromZval<'a> for OptStr {
    const TYPE: DataType = DataType::String;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(OptStr(
            (!z.is_null()).then(|| scalar_bytes(z).ok_or_else(|| type_name(z))),
        ))
    }
}

impl Param for Option<OptStr> {
    type Value = Option<Vec<u8>>;
    fn read(self, at: &At) -> PhpResult<Option<Vec<u8>>> {
        match self.and_then(|a| a.0) {
            None => Ok(None),
            Some(v) => v.map(Some).map_err(|got| type_error(at, "?string", &got)),
        }
    }
}

/// An optional `int` parameter of the modern classes (`null`: the default).
pub struct OptInt(Option<IntArg>);

impl<'a> FromZval<'a> for OptInt {
    const TYPE: DataType = DataType::Long;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(OptInt(if z.is_null() {
            None
        } else {
            IntArg::from_zval(z)
        }))
    }
}

impl Param for Option<OptInt> {
    type Value = Option<i64>;
    fn read(self, at: &At) -> PhpResult<Option<i64>> {
        match self.and_then(|a| a.0) {
            None => Ok(None),
            Some(v) => v.0.map(Some).map_err(|got| type_error(at, "?int", &got)),
        }
    }
}

/// A float read from any zval as PHP coerces one for a `float` parameter
/// (for values of an options array).
pub fn number_of(z: &Zval) -> Result<f64, String> {
    float_of(z)
}
