//! Argument types of the modern queue classes that `args.rs` does not
//! have: `mixed`, a `?int` whose null is a value, a `bool` with a default.

use ext_php_rs::convert::FromZval;
use ext_php_rs::exception::PhpResult;
use ext_php_rs::flags::DataType;
use ext_php_rs::types::Zval;

use crate::args::{At, IntArg, Param, bool_of, type_error};

/// An argument of any type, read by the method itself (reflection: `mixed`).
pub struct Mixed<'a>(pub &'a Zval);

impl<'a> FromZval<'a> for Mixed<'a> {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(Mixed(z))
    }
}

/// `?int` where null is a value of its own (`maxAttempts`: unlimited); the
/// default comes through `From<i64>`.
pub struct NullableInt(Option<IntArg>);

impl From<i64> for NullableInt {
    fn from(v: i64) -> Self {
        NullableInt(Some(IntArg::from(v)))
    }
}

impl<'a> FromZval<'a> for NullableInt {
    const TYPE: DataType = DataType::Long;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(NullableInt(None))
        } else {
            IntArg::from_zval(z).map(|n| NullableInt(Some(n)))
        }
    }
}

impl Param for Option<NullableInt> {
    /// `None`: not given; `Some(None)`: null.
    type Value = Option<Option<i64>>;
    fn read(self, at: &At) -> PhpResult<Option<Option<i64>>> {
        match self {
            None => Ok(None),
            Some(NullableInt(None)) => Ok(Some(None)),
            Some(NullableInt(Some(n))) => n.read(at).map(|n| Some(Some(n))),
        }
    }
}

/// A `bool` parameter with a default (`true` through `From<bool>`).
pub struct BoolArg(Result<bool, String>);

impl From<bool> for BoolArg {
    fn from(v: bool) -> Self {
        BoolArg(Ok(v))
    }
}

impl<'a> FromZval<'a> for BoolArg {
    const TYPE: DataType = DataType::Bool;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(BoolArg(bool_of(z)))
    }
}

impl Param for Option<BoolArg> {
    type Value = bool;
    fn read(self, at: &At) -> PhpResult<bool> {
        match self {
            None => Ok(true),
            Some(BoolArg(v)) => v.map_err(|got| type_error(at, "bool", &got)),
        }
    }
}
