//! Receipts: what a reserved task is acked, nacked and touched with.
//!
//! A receipt is `<rid>-<tag>`: the request id of the reserve that took it
//! (32 hex digits; one reserve of many tasks shares it, and the scripts store
//! it with each reservation) and a tag of the task id (8 hex digits, FNV-1a),
//! so that a receipt presented with another task's id is refused as a bad
//! argument before anything is sent, instead of reading as a lost
//! reservation. Receipts of ferrolock before tags (the bare 32 digits) are
//! taken as they are.

use crate::error::{Error, Result};

/// Length of a request id (a [`new_token`](crate::new_token)).
const RID_LEN: usize = 32;

/// The receipt of task `id` reserved by request `rid`.
pub(crate) fn make(rid: &str, id: &[u8]) -> String {
    format!("{rid}-{:08x}", tag(id))
}

/// The request id in `receipt`, checked against the task `id` it is
/// presented with.
pub(crate) fn rid_of<'a>(receipt: &'a str, id: &[u8]) -> Result<&'a str> {
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    let shown = || {
        let mut s: String = receipt.chars().take(48).collect();
        if s.len() < receipt.len() {
            s.push('…');
        }
        s
    };
    match receipt.split_once('-') {
        Some((rid, t)) if rid.len() == RID_LEN && t.len() == 8 && hex(rid) && hex(t) => {
            if u32::from_str_radix(t, 16).ok() == Some(tag(id)) {
                Ok(rid)
            } else {
                Err(Error::invalid(format!(
                    "receipt {:?} was issued for another task, not for {}",
                    shown(),
                    crate::keys::label("task", id)
                )))
            }
        }
        None if receipt.len() == RID_LEN && hex(receipt) => Ok(receipt),
        _ => Err(Error::invalid(format!(
            "receipt {:?} is not a receipt ferrolock issued",
            shown()
        ))),
    }
}

/// 32-bit FNV-1a of `id`.
fn tag(id: &[u8]) -> u32 {
    id.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// A number in [0, 1) from the random bits of request id `rid`: the jitter
/// seed of the tasks it reserves (no second draw from the OS).
pub(crate) fn seed(rid: &str) -> f64 {
    let bits = rid
        .get(..13)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0);
    bits as f64 / (1u64 << 52) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_names_its_task() {
        let rid = crate::new_token();
        let r = make(&rid, b"a");
        assert_eq!(r.len(), 41);
        assert_eq!(rid_of(&r, b"a").unwrap(), rid);
        let e = rid_of(&r, b"b").unwrap_err();
        assert!(
            e.is_invalid_argument() && e.message().starts_with("receipt"),
            "{e}"
        );
        assert!(e.message().contains("another task"), "{e}");
        // Receipts from before tags, and junk.
        assert_eq!(rid_of(&rid, b"anything").unwrap(), rid);
        for bad in ["", "x", "nope-12345678", &format!("{rid}-zz")] {
            assert!(
                rid_of(bad, b"a")
                    .unwrap_err()
                    .message()
                    .starts_with("receipt")
            );
        }
    }

    #[test]
    fn seeds_are_fractions() {
        for _ in 0..100 {
            let s = seed(&crate::new_token());
            assert!((0.0..1.0).contains(&s));
        }
        assert_eq!(seed("0000000000000"), 0.0);
    }
}
