//! Argument types of the queue methods (`RedisQueue`'s, and
//! `Ferrolock\Queue`'s ids of dead tasks) that `args.rs` does not have.

use ext_php_rs::convert::FromZval;
use ext_php_rs::exception::PhpResult;
use ext_php_rs::flags::DataType;
use ext_php_rs::types::{ZendHashTable, Zval};

use crate::args::{At, IdsArg, NumArg, Param, type_error, type_name};

/// An optional `int|float|null` of seconds, where null means "the default"
/// (reflection: `?float`).
pub struct OptSeconds(Option<NumArg>);

impl<'a> FromZval<'a> for OptSeconds {
    const TYPE: DataType = DataType::Double;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(OptSeconds(None))
        } else {
            NumArg::from_zval(z).map(|n| OptSeconds(Some(n)))
        }
    }
}

impl Param for Option<OptSeconds> {
    type Value = Option<f64>;
    fn read(self, at: &At) -> PhpResult<Option<f64>> {
        match self.and_then(|s| s.0) {
            None => Ok(None),
            Some(n) => n.read(at).map(Some),
        }
    }
}

/// Optional task ids: one id, an array of them, or null (`None`).
pub struct OptIds(Option<IdsArg>);

impl<'a> FromZval<'a> for OptIds {
    const TYPE: DataType = DataType::Mixed;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        if z.is_null() {
            Some(OptIds(None))
        } else {
            IdsArg::from_zval(z).map(|n| OptIds(Some(n)))
        }
    }
}

impl Param for Option<OptIds> {
    type Value = Option<Vec<Vec<u8>>>;
    fn read(self, at: &At) -> PhpResult<Option<Vec<Vec<u8>>>> {
        match self.and_then(|s| s.0) {
            None => Ok(None),
            Some(ids) => ids.read(at).map(Some),
        }
    }
}

/// An `array` parameter (reflection: `array`), any other value a `TypeError`.
pub struct ArrayArg<'a>(&'a Zval);

impl<'a> FromZval<'a> for ArrayArg<'a> {
    const TYPE: DataType = DataType::Array;
    fn from_zval(z: &'a Zval) -> Option<Self> {
        Some(ArrayArg(z))
    }
}

impl<'a> Param for ArrayArg<'a> {
    type Value = &'a ZendHashTable;
    fn read(self, at: &At) -> PhpResult<&'a ZendHashTable> {
        self.0
            .array()
            .ok_or_else(|| type_error(at, "array", &type_name(self.0)))
    }
}

/// An optional `?array` (null: `None`).
impl<'a> Param for Option<ArrayArg<'a>> {
    type Value = Option<&'a ZendHashTable>;
    fn read(self, at: &At) -> PhpResult<Option<&'a ZendHashTable>> {
        match self.filter(|a| !a.0.is_null()) {
            None => Ok(None),
            Some(a) => a.read(at).map(Some),
        }
    }
}
