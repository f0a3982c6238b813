//! Reading RESP2 replies for [`Wire`](super::wire): a buffer kept for the
//! connection's life, a scan that tells whether a whole reply is in it, and
//! the reply built once it is.
//!
//! Why not the redis crate's `Parser`: each call of its `parse_value` runs a
//! parser-combinator state machine and zero-fills read buffer space; for the
//! worker loop's reply that was about 16,000 instructions of the client's
//! 45,000 per job (callgrind), against about 4,000 here: a scan, then the
//! values and their allocations. Error replies (`-ERR ...`) are
//! still parsed by the redis crate, which knows their kinds and codes, and
//! so is anything this does not recognise (it answers with the crate's own
//! parse error).

use std::io::{self, Read};

use redis::{RedisError, RedisResult, Value};

/// Nesting beyond this is refused (as the redis crate does).
const MAX_DEPTH: usize = 100;

/// Bytes asked for by one read at least.
const READ_SIZE: usize = 16 * 1024;

/// The bytes read from a connection and not yet parsed.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    /// Always initialised up to its length: reads go into `buf[end..]`.
    buf: Vec<u8>,
    /// The unparsed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

/// What a scan of the buffer found.
enum Scan {
    /// A whole reply of this many bytes.
    Whole(usize),
    /// Not all of it has arrived.
    Partial,
    /// Not RESP2 that this reads: left to the redis crate's parser.
    Other,
}

impl Replies {
    /// Reads one reply from `src` (more bytes read as needed).
    pub(crate) fn read_value(&mut self, src: &mut impl Read) -> RedisResult<Value> {
        if self.start == self.end {
            self.fill(src)?;
        }
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some((value, n)) = one_line(pending) {
                self.start += n;
                if self.start == self.end {
                    (self.start, self.end) = (0, 0);
                }
                return Ok(value);
            }
            match scan(pending, 0) {
                Scan::Whole(n) => {
                    let value = build(&pending[..n]);
                    self.start += n;
                    if self.start == self.end {
                        (self.start, self.end) = (0, 0);
                    }
                    return value;
                }
                Scan::Other => {
                    // The crate's answer (an error, or a value this
                    // does not read: either way the connection is not
                    // used again, its framing being unknown here).
                    let answer = redis::parse_redis_value(pending);
                    (self.start, self.end) = (0, 0);
                    return match answer {
                        Err(e) => Err(e),
                        Ok(_) => Err(RedisError::from(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a reply ferrolock does not read (not RESP2)",
                        ))),
                    };
                }
                Scan::Partial => self.fill(src)?,
            }
        }
    }

    /// Reads what has arrived (at least one byte) after the unparsed ones.
    fn fill(&mut self, src: &mut impl Read) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Room for a read at least as large as what is waiting (a large
        // reply is scanned again after each read: doubling keeps that linear).
        let want = self.end + READ_SIZE.max(self.end);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        match src.read(&mut self.buf[self.end..])? {
            0 => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            n => {
                self.end += n;
                Ok(())
            }
        }
    }
}

/// A whole reply at the start of `b` that is one line and needs no
/// allocation (`+OK`, an integer, a nil bulk string: what a lock's acquire
/// and release get back), and its length; `None` for any other (read by
/// [`scan`] and [`build`]), or one not all there yet.
fn one_line(b: &[u8]) -> Option<(Value, usize)> {
    match *b.first()? {
        b'+' if b.starts_with(b"+OK\r\n") => Some((Value::Okay, 5)),
        b'$' if b.starts_with(b"$-1\r\n") => Some((Value::Nil, 5)),
        b':' => {
            let eol = b.iter().position(|&c| c == b'\r')?;
            if b.get(eol + 1) != Some(&b'\n') {
                return None;
            }
            Some((Value::Int(int(&b[1..eol])?), eol + 2))
        }
        _ => None,
    }
}

/// The index of the `\r` of the first `\r\n` in `b`.
fn line_end(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = b[from..].iter().position(|&c| c == b'\r') {
        let at = from + i;
        match b.get(at + 1) {
            Some(b'\n') => return Some(at),
            Some(_) => from = at + 1,
            None => return None,
        }
    }
    None
}

/// A decimal integer line (`-?[0-9]+`).
fn int(line: &[u8]) -> Option<i64> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -n } else { n })
}

/// Whether `b` starts with a whole reply, and its length.
fn scan(b: &[u8], depth: usize) -> Scan {
    let Some(&kind) = b.first() else {
        return Scan::Partial;
    };
    if depth > MAX_DEPTH || !matches!(kind, b'+' | b':' | b'$' | b'*' | b'-') {
        return Scan::Other;
    }
    let Some(eol) = line_end(b) else {
        return Scan::Partial;
    };
    let after = eol + 2;
    match kind {
        b'+' | b'-' => Scan::Whole(after),
        b':' => match int(&b[1..eol]) {
            Some(_) => Scan::Whole(after),
            None => Scan::Other,
        },
        b'$' => match int(&b[1..eol]) {
            Some(-1) => Scan::Whole(after),
            Some(n) if n >= 0 => {
                let end = after + n as usize;
                match b.get(end..end + 2) {
                    None => Scan::Partial,
                    Some(b"\r\n") => Scan::Whole(end + 2),
                    Some(_) => Scan::Other,
                }
            }
            _ => Scan::Other,
        },
        _ => match int(&b[1..eol]) {
            Some(-1) => Scan::Whole(after),
            Some(n) if n >= 0 => {
                let mut at = after;
                for _ in 0..n {
                    match scan(&b[at..], depth + 1) {
                        Scan::Whole(used) => at += used,
                        other => return other,
                    }
                }
                Scan::Whole(at)
            }
            _ => Scan::Other,
        },
    }
}

/// The reply `b` holds, whole (see [`scan`]).
fn build(b: &[u8]) -> RedisResult<Value> {
    let mut at = 0;
    value(b, &mut at)
}

fn value(b: &[u8], at: &mut usize) -> RedisResult<Value> {
    let rest = &b[*at..];
    let eol = line_end(rest).unwrap_or(rest.len());
    let line = &rest[1..eol];
    let after = *at + eol + 2;
    let v = match rest[0] {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
        b'-' => redis::parse_redis_value(&rest[..eol + 2])?,
        b':' => Value::Int(int(line).unwrap_or_default()),
        b'$' => match int(line).unwrap_or(-1) {
            n if n < 0 => Value::Nil,
            n => {
                let end = after + n as usize;
                *at = end + 2;
                return Ok(Value::BulkString(b[after..end].to_vec()));
            }
        },
        _ => match int(line).unwrap_or(-1) {
            n if n < 0 => Value::Nil,
            n => {
                *at = after;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(value(b, at)?);
                }
                return Ok(Value::Array(items));
            }
        },
    };
    *at = after;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source handing out `data` `step` bytes per read.
    struct Drip<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Drip<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    const SAMPLE: &[u8] = b"+OK\r\n+PONG\r\n:-42\r\n$-1\r\n$0\r\n\r\n$5\r\na\r\nbc\r\n*-1\r\n*0\r\n\
        *6\r\n:1\r\n*2\r\n$2\r\nt1\r\n$17\r\n1764130000.123456\r\n:0\r\n*1\r\n:1\r\n$3\r\n1.5\r\n:-1\r\n\
        -NOSCRIPT No matching script.\r\n*2\r\n-ERR inner\r\n:7\r\n";

    #[test]
    fn reads_what_the_redis_crate_reads_in_any_chunks() {
        let expected: Vec<Value> = {
            let mut p = redis::Parser::new();
            let mut src = SAMPLE;
            (0..11).map(|_| p.parse_value(&mut src).unwrap()).collect()
        };
        for step in [1, 2, 3, 7, 64, SAMPLE.len()] {
            let mut r = Replies::default();
            let mut src = Drip { data: SAMPLE, step };
            for want in &expected {
                assert_eq!(&r.read_value(&mut src).unwrap(), want, "step {step}");
            }
            assert_eq!(
                r.read_value(&mut src).unwrap_err().kind(),
                redis::ErrorKind::Io,
                "the end of the stream"
            );
        }
    }

    #[test]
    fn a_large_reply_arrives_in_pieces() {
        let n = 20_000;
        let mut data = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            let s = format!("task-{i}");
            data.extend_from_slice(format!("${}\r\n{s}\r\n", s.len()).as_bytes());
        }
        let mut r = Replies::default();
        let got = r
            .read_value(&mut Drip {
                data: &data,
                step: 5000,
            })
            .unwrap();
        let Value::Array(items) = got else {
            panic!("{got:?}")
        };
        assert_eq!(items.len(), n);
        assert_eq!(items[n - 1], Value::BulkString(b"task-19999".to_vec()));
    }

    #[test]
    fn garbage_is_refused_as_the_redis_crate_refuses_it() {
        for bad in [&b"?what\r\n"[..], b":12x\r\n", b"$abc\r\n"] {
            let mut r = Replies::default();
            let mut src = Drip {
                data: bad,
                step: 100,
            };
            assert!(r.read_value(&mut src).is_err(), "{bad:?}");
        }
    }
}
