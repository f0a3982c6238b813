//! Commands packed once: a [`Template`] holds a command whose arguments are
//! all fixed but one, already encoded in RESP, so that sending it costs a
//! copy of its bytes and of the one argument that changes (a lock's owner
//! token), into the connection's own write buffer ([`Conn::request`]).
//!
//! Why: an uncontended acquire+release builds two commands. Built with the
//! redis crate's `Cmd` (its argument list and data grown argument by
//! argument, then packed into a new `Vec`, the numbers formatted each time)
//! they were about a third of the client's 13,700 instructions per pair
//! (callgrind), and a dozen allocations. The bytes sent are the same.
//!
//! [`Conn::request`]: super::conn::Conn::request

/// A command with one argument left open (the *hole*): everything before
/// and after it packed once.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// `*<argc>\r\n` and the arguments before the hole, packed.
    head: Vec<u8>,
    /// The arguments after the hole, packed.
    tail: Vec<u8>,
}

impl Template {
    /// The command `before`, the hole, `after` (each argument as bytes).
    pub(crate) fn new(before: &[&[u8]], after: &[&[u8]]) -> Self {
        let mut head = Vec::with_capacity(16 + packed_len(before));
        head.push(b'*');
        push_decimal(&mut head, before.len() + 1 + after.len());
        head.extend_from_slice(b"\r\n");
        for arg in before {
            push_bulk(&mut head, arg);
        }
        let mut tail = Vec::with_capacity(packed_len(after));
        for arg in after {
            push_bulk(&mut tail, arg);
        }
        Self { head, tail }
    }

    /// Appends the command with `hole` in its place to `out`: the same
    /// bytes as the redis crate's `Cmd` packs for the same arguments.
    pub(crate) fn write(&self, out: &mut Vec<u8>, hole: &[u8]) {
        out.reserve(self.head.len() + hole.len() + 24 + self.tail.len());
        out.extend_from_slice(&self.head);
        push_bulk(out, hole);
        out.extend_from_slice(&self.tail);
    }
}

/// The length of `args` packed as bulk strings.
fn packed_len(args: &[&[u8]]) -> usize {
    args.iter().map(|a| a.len() + 24).sum()
}

/// Appends `arg` as a RESP bulk string (`$<len>\r\n<arg>\r\n`).
pub(crate) fn push_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    push_decimal(out, arg.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the redis crate packs for `args`.
    fn crate_packs(args: &[&[u8]]) -> Vec<u8> {
        let mut cmd = redis::Cmd::new();
        for a in args {
            cmd.arg(*a);
        }
        cmd.get_packed_command()
    }

    /// Arguments before the hole, the hole, arguments after it.
    type Case<'a> = (&'a [&'a [u8]], &'a [u8], &'a [&'a [u8]]);

    #[test]
    fn packs_what_the_redis_crate_packs() {
        let long = vec![b'x'; 12_345];
        let sha = b"0123456789abcdef0123456789abcdef01234567";
        let cases: &[Case<'_>] = &[
            (
                &[b"SET", b"Lock:orders"],
                b"0f8e2a4b6c7d1e3f5a9b8c7d6e5f4a3b",
                &[b"NX", b"PX", b"30000"],
            ),
            (
                &[b"EVALSHA", sha, b"4", b"Lock:o", b"{x}f", b"{x}w", b"{x}l"],
                b"tok",
                &[b"{x}fl:w:"],
            ),
            (&[b"PING"], b"", &[]),
            (&[], b"GET", &[b"k"]),
            (&[b"SET", b"a\r\n{b}\0"], &long, &[b"", b"0"]),
        ];
        let (xs, zs) = ([&b"x"[..]; 10], [&b"z"[..]; 100]);
        let cases = [cases, &[(&xs[..], &b"y"[..], &zs[..])]].concat();
        for (before, hole, after) in &cases {
            let t = Template::new(before, after);
            let mut out = b"prior bytes stay".to_vec();
            t.write(&mut out, hole);
            let args: Vec<&[u8]> = before
                .iter()
                .copied()
                .chain([*hole])
                .chain(after.iter().copied())
                .collect();
            let mut expected = b"prior bytes stay".to_vec();
            expected.extend_from_slice(&crate_packs(&args));
            assert_eq!(out, expected, "{:?}", String::from_utf8_lossy(&expected));
        }
    }

    #[test]
    fn decimals_match_the_crate_at_every_width() {
        for n in [
            0usize,
            9,
            10,
            99,
            100,
            9_999,
            10_000,
            123_456_789,
            usize::MAX,
        ] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
