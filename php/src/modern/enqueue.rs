//! How `Ferrolock\Queue::enqueue()` reads its `$ids`: one id, a list of
//! ids, or an array of id => payload, told apart by `$payloads` or, when it
//! is null, by the array's keys (see the stubs).

use ext_php_rs::exception::PhpResult;
use ext_php_rs::types::array::Iter;
use ext_php_rs::types::{ZendHashTable, Zval};

use crate::args::{At, scalar_bytes, type_error, type_name};
use crate::errors::value_error;

/// What `enqueue()` adds.
pub(super) enum Items {
    /// Ids without payloads (those they have are kept).
    Ids(Vec<Vec<u8>>),
    /// Ids with the payload each gets.
    Payloads(Vec<(Vec<u8>, Vec<u8>)>),
}

/// A task id: a string, an int, or a float (as PHP converts it to a string).
pub(super) fn is_id(z: &Zval) -> bool {
    z.is_string() || z.is_long() || z.is_double()
}

/// How an array's keys read, for `enqueue()` without `$payloads`.
enum KeyShape {
    /// 0, 1, 2, … in order: a list of ids.
    List,
    /// At least one string key: id => payload.
    Strings,
    /// Integer keys that are not a list: ambiguous.
    Integers,
}

fn key_shape(array: &ZendHashTable) -> KeyShape {
    let mut keys = Iter::new(array);
    let mut list = true;
    let mut next: i64 = 0;
    while let Some((key, _)) = keys.next_zval() {
        if key.is_string() {
            return KeyShape::Strings;
        }
        list &= key.long() == Some(next);
        next += 1;
    }
    if list {
        KeyShape::List
    } else {
        KeyShape::Integers
    }
}

/// `enqueue()`'s `$ids` (an id or an array, checked before), read as
/// `$payloads` says: null decides by the keys (see the stubs).
pub(super) fn enqueue_items(at: &At, ids: &Zval, payloads: Option<bool>) -> PhpResult<Items> {
    let Some(array) = ids.array() else {
        if payloads == Some(true) {
            return Err(value_error(format!(
                "{at}: with payloads: true, give an array of id => payload, not one id"
            )));
        }
        return Ok(Items::Ids(vec![scalar_bytes(ids).unwrap_or_default()]));
    };
    let with_payloads = match payloads {
        Some(p) => p,
        None => match key_shape(array) {
            KeyShape::List => false,
            KeyShape::Strings => true,
            KeyShape::Integers => {
                return Err(value_error(format!(
                    "{at}: an array whose integer keys are not 0, 1, 2, ... in order is \
                     ambiguous: a list of ids with gaps (array_filter) or numeric ids with \
                     payloads? Say payloads: false (the values are ids) or payloads: true \
                     (id => payload)"
                )));
            }
        },
    };
    let mut entries = Iter::new(array);
    if with_payloads {
        let mut tasks = Vec::with_capacity(array.len());
        while let Some((key, value)) = entries.next_zval() {
            let id = scalar_bytes(&key).unwrap_or_default();
            let value = value.dereference();
            let Some(payload) = value.zend_str().map(|s| s.as_bytes().to_vec()) else {
                return Err(type_error(
                    at,
                    "array of id => string payload",
                    &format!(
                        "{} (the payload of id {:?})",
                        type_name(value),
                        String::from_utf8_lossy(&id)
                    ),
                ));
            };
            tasks.push((id, payload));
        }
        return Ok(Items::Payloads(tasks));
    }
    let mut list = Vec::with_capacity(array.len());
    while let Some((_, value)) = entries.next_zval() {
        let value = value.dereference();
        if !is_id(value) {
            return Err(type_error(
                at,
                "array of string|int ids",
                &format!("an array holding {}", type_name(value)),
            ));
        }
        list.push(scalar_bytes(value).unwrap_or_default());
    }
    Ok(Items::Ids(list))
}
