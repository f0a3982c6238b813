//! Build-time work, so that no process pays for it at run time:
//!
//! 1. the table of cluster-slot hash tags (see `src/keys.rs`);
//! 2. the Lua scripts as sent to Redis (see `src/scripts/mod.rs`).
//!
//! ## Slot tags
//!
//! Every auxiliary key of a lock or queue starts with `{tag}`, where `tag` is
//! a short string hashing to the slot of the main key. Finding one tag per
//! slot takes ~250k CRC16 computations (5 ms): done here, once per build,
//! rather than in the first call of every process.
//!
//! The tags are part of the Redis key layout: the first string, in the order
//! of `ALPHABET` (shorter first, then the last character varying fastest),
//! that hashes to each slot. Changing the order changes key names; a unit test
//! in `keys.rs` pins a few of them.
//!
//! ## Scripts
//!
//! Each script is sent as the helpers of `src/scripts/prelude.lua` that it
//! uses (directly or through another helper), followed by its own body. Lua
//! creates a closure for every `local function` each time a script runs, so
//! prepending the whole prelude cost every call about 1.5 µs of server CPU
//! (measured pipelined, so with warm caches).
//!
//! A script may mark where its common case ends with a line starting with
//! [`SLOW_PATH`], at its top level (helpers defined inside a block would be
//! local to it). The helpers its code above that line uses go in front of
//! the script; the other helpers it needs are defined at the marker, so a
//! call that returns before the marker never creates their closures (each
//! costs Redis about 1,400 instructions, callgrind).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const SLOTS: usize = 16384;
const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn slot_tags() -> Vec<String> {
    let mut table = vec![String::new(); SLOTS];
    let mut missing = SLOTS;
    let mut len = 1;
    while missing > 0 {
        // All strings of `len` characters, as an odometer over ALPHABET.
        let mut idx = vec![0usize; len];
        'candidates: loop {
            let candidate: Vec<u8> = idx.iter().map(|&i| ALPHABET[i]).collect();
            let slot = crc16::State::<crc16::XMODEM>::calculate(&candidate) as usize % SLOTS;
            if table[slot].is_empty() {
                table[slot] = String::from_utf8(candidate).expect("ASCII alphabet");
                missing -= 1;
            }
            for pos in (0..len).rev() {
                idx[pos] += 1;
                if idx[pos] < ALPHABET.len() {
                    continue 'candidates;
                }
                idx[pos] = 0;
            }
            break;
        }
        len += 1;
    }
    table
}

/// One helper of the prelude: its name and its text (leading comments included).
struct Helper {
    name: String,
    text: String,
}

/// Splits the prelude into helpers. A helper starts at the comment lines
/// right above a `local function <name>(` at the start of a line and runs up
/// to the next helper; the file's header comment belongs to none.
fn helpers(prelude: &str) -> Vec<Helper> {
    let lines: Vec<&str> = prelude.lines().collect();
    let starts: Vec<(usize, String)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let rest = l.strip_prefix("local function ")?;
            let name = rest.split('(').next()?.trim();
            let mut start = i;
            while start > 0 && lines[start - 1].starts_with("--") {
                start -= 1;
            }
            Some((start, name.to_string()))
        })
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, (start, name))| {
            let end = starts.get(k + 1).map_or(lines.len(), |(s, _)| *s);
            Helper {
                name: name.clone(),
                text: lines[*start..end].join("\n").trim_end().to_string() + "\n",
            }
        })
        .collect()
}

/// `code` without its comments (`--` to the end of the line; our scripts
/// have no `--` inside strings).
fn strip_comments(code: &str) -> String {
    code.lines()
        .map(|l| l.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` (comments stripped) mentions `name` as a whole word: a
/// call, or the function passed as a value.
fn uses(code: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(name).any(|(i, _)| {
        !code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| word(c) || c == '.' || c == ':')
            && !code[i + name.len()..].chars().next().is_some_and(word)
    })
}

/// A line starting with this splits a script into its common case (above)
/// and the rest (below), where the helpers only the rest uses are defined.
const SLOW_PATH: &str = "-- slow path";

/// The helpers (indexes into `helpers`) that `code` needs, directly or
/// through other helpers, leaving out those in `defined`.
fn needed_by(helpers: &[Helper], code: &str, defined: &BTreeSet<usize>) -> BTreeSet<usize> {
    let mut needed = BTreeSet::new();
    let mut todo = vec![strip_comments(code)];
    while let Some(code) = todo.pop() {
        for (i, h) in helpers.iter().enumerate() {
            if !defined.contains(&i) && !needed.contains(&i) && uses(&code, &h.name) {
                needed.insert(i);
                todo.push(strip_comments(&h.text));
            }
        }
    }
    needed
}

/// The helpers in `which`, in prelude order (a helper only calls helpers
/// defined above it in the prelude).
fn definitions(helpers: &[Helper], which: &BTreeSet<usize>) -> String {
    which
        .iter()
        .map(|&i| helpers[i].text.clone() + "\n")
        .collect()
}

/// `body` with the prelude's helpers it needs: those of its common case in
/// front, those only the part after a [`SLOW_PATH`] line uses at that line.
fn assemble(helpers: &[Helper], body: &str) -> String {
    let (head, tail) = match body.find(&format!("\n{SLOW_PATH}")) {
        Some(at) => body.split_at(at + 1),
        None => (body, ""),
    };
    let first = needed_by(helpers, head, &BTreeSet::new());
    let rest = needed_by(helpers, tail, &first);
    let mut out = definitions(helpers, &first);
    out.push_str(head);
    if !tail.is_empty() {
        let (marker, after) = tail.split_once('\n').unwrap_or((tail, ""));
        out.push_str(marker);
        out.push('\n');
        out.push_str(&definitions(helpers, &rest));
        out.push_str(after);
    }
    out
}

fn write_scripts(out_dir: &Path) {
    let dir = Path::new("src/scripts");
    println!("cargo::rerun-if-changed={}", dir.display());
    let prelude = std::fs::read_to_string(dir.join("prelude.lua")).expect("reading prelude.lua");
    let helpers = helpers(&prelude);
    assert!(!helpers.is_empty(), "prelude.lua defines no helpers");
    let target = out_dir.join("scripts");
    // Start empty: a script renamed or removed must not linger here.
    let _ = std::fs::remove_dir_all(&target);
    std::fs::create_dir_all(&target).expect("creating the scripts directory");
    for entry in std::fs::read_dir(dir).expect("listing src/scripts") {
        let path = entry.expect("listing src/scripts").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.ends_with(".lua") || name == "prelude.lua" {
            continue;
        }
        let body = std::fs::read_to_string(&path).expect("reading a script");
        std::fs::write(target.join(name), assemble(&helpers, &body)).expect("writing a script");
    }
}

fn write_slot_tags(out_dir: &Path) {
    let mut src = format!(
        "/// The hash tag of each cluster slot (generated by `build.rs`).\nstatic SLOT_TAGS: [&str; {SLOTS}] = [\n"
    );
    for tag in slot_tags() {
        writeln!(src, "    {tag:?},").expect("writing to a String");
    }
    src.push_str("];\n");
    std::fs::write(out_dir.join("slot_tags.rs"), src).expect("writing the slot tag table");
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    write_slot_tags(&out_dir);
    write_scripts(&out_dir);
}
