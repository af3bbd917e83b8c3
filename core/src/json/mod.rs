//! Lookups in `serde_json` values that the write path makes for every object, and the JSON
//! writer of API objects (which knows where stored objects keep text).

use serde_json::Value;

pub mod scan;

/// JSON pointer lookups (RFC 6901) without [`Value::pointer`]'s two string replacements per
/// step when the pointer has no escapes (`~0`, `~1`), which is every pointer written in code.
pub trait Pointer {
    /// The value at `pointer` (`/spec/template`), as [`Value::pointer`].
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// The value at `pointer`, mutable, as [`Value::pointer_mut`].
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        match plain_steps(pointer) {
            Some(mut steps) => steps.try_fold(self, |at, token| match at {
                Value::Object(map) => map.get(token),
                Value::Array(items) => index(token).and_then(|i| items.get(i)),
                _ => None,
            }),
            None => self.pointer(pointer),
        }
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        match plain_steps(pointer) {
            Some(mut steps) => steps.try_fold(self, |at, token| match at {
                Value::Object(map) => map.get_mut(token),
                Value::Array(items) => index(token).and_then(|i| items.get_mut(i)),
                _ => None,
            }),
            None => self.pointer_mut(pointer),
        }
    }
}

/// The steps of a pointer that needs no unescaping; `None` for one with escapes, without its
/// leading `/` or empty, which [`Value::pointer`] handles (at no cost for the last two).
fn plain_steps(pointer: &str) -> Option<PlainSteps<'_>> {
    let rest = pointer.strip_prefix('/')?;
    // A plain byte loop: pointers are a few dozen bytes, shorter than `memchr`'s set-up pays for.
    (!rest.bytes().any(|b| b == b'~')).then_some(PlainSteps { rest: Some(rest) })
}

/// The `/`-separated steps of a pointer without escapes.
struct PlainSteps<'a> {
    rest: Option<&'a str>,
}

impl<'a> Iterator for PlainSteps<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.bytes().position(|b| b == b'/') {
            Some(at) => {
                self.rest = Some(&rest[at + 1..]);
                Some(&rest[..at])
            }
            None => self.rest.take(),
        }
    }
}

/// An array index as RFC 6901 writes it: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

/// The strings of a JSON array (`None`, a non-array or non-string items give nothing).
pub fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Append `value` as compact JSON, byte for byte as `serde_json` writes it, without its
/// serializer's machinery: strings are copied in runs between the bytes JSON escapes, found
/// eight at a time ([`first_escape`]). Every answer, list item and watch event goes through here.
pub fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Writing to a Vec cannot fail.
        Value::Number(number) => {
            let _ = serde_json::to_writer(&mut *out, number);
        }
        Value::String(text) => write_str(out, text),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, value)) in map.iter().enumerate() {
                member_key(out, i, key);
                write(out, value);
            }
            out.push(b'}');
        }
    }
}

/// Append `text` as a JSON string, escaped as `serde_json` escapes it (`\"`, `\\`, the short
/// escapes of `\b \f \n \r \t`, `\u00xx` for the other control characters).
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let mut rest = text.as_bytes();
    while let Some(at) = first_escape(rest) {
        out.extend_from_slice(&rest[..at]);
        let byte = rest[at];
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
        }
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

/// The index of the first byte of `bytes` that a JSON string cannot hold as it is (`"`, `\`, a
/// control character), looked for eight bytes at a time: object texts are mostly strings that
/// need no escape, and a byte-by-byte table lookup was the largest single cost of writing them.
pub fn first_escape(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    for (n, word) in words.by_ref().enumerate() {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let word = u64::from_le_bytes(eight);
        // A byte's high bit is set in `found` where it is `"`, `\` or below 0x20 (the lowest
        // such bit is always a true match: a borrow only runs upward from one).
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let found = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGHS;
        if found != 0 {
            return Some(n * 8 + (found.trailing_zeros() / 8) as usize);
        }
    }
    let done = bytes.len() - words.remainder().len();
    words
        .remainder()
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .map(|at| done + at)
}

/// Append an API object as compact JSON: as [`write()`], except for its
/// `metadata.managedFields[].fieldsV1`, which stored objects keep as its JSON text (the field
/// ownership module writes it) and which is written as the JSON it holds. A text that is not
/// `FieldsV1` (never one the server wrote) stays a string, so the output is always valid JSON.
pub fn write_object(out: &mut Vec<u8>, object: &Value) {
    let Some(map) = object.as_object() else {
        return write(out, object);
    };
    out.push(b'{');
    for (i, (key, value)) in map.iter().enumerate() {
        member_key(out, i, key);
        match value.as_object() {
            Some(meta) if key == "metadata" => {
                out.push(b'{');
                for (j, (field, value)) in meta.iter().enumerate() {
                    member_key(out, j, field);
                    match value.as_array() {
                        Some(entries) if field == "managedFields" => write_entries(out, entries),
                        _ => write(out, value),
                    }
                }
                out.push(b'}');
            }
            _ => write(out, value),
        }
    }
    out.push(b'}');
}

/// [`write_object`] into a new buffer.
pub fn object_to_vec(object: &Value) -> Vec<u8> {
    // Most objects fit: no copy while the buffer grows.
    let mut out = Vec::with_capacity(4096);
    write_object(&mut out, object);
    out
}

fn member_key(out: &mut Vec<u8>, index: usize, key: &str) {
    if index > 0 {
        out.push(b',');
    }
    write_str(out, key);
    out.push(b':');
}

/// `managedFields` entries, each `fieldsV1` text written as its JSON.
fn write_entries(out: &mut Vec<u8>, entries: &[Value]) {
    out.push(b'[');
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let Some(map) = entry.as_object() else {
            write(out, entry);
            continue;
        };
        out.push(b'{');
        for (j, (key, value)) in map.iter().enumerate() {
            member_key(out, j, key);
            match value.as_str() {
                Some(text) if key == "fieldsV1" && is_object_of_objects(text) => {
                    out.extend_from_slice(text.as_bytes());
                }
                _ => write(out, value),
            }
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// Whether `text` is compact JSON of an object (nothing around it) whose members are all such
/// objects, keys valid JSON strings: the shape of `FieldsV1`, as the server writes it. Checked in
/// one pass without building anything (every object written to a client has its stored texts
/// checked, so that no text could ever be written out as anything but JSON).
pub fn is_object_of_objects(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0usize;
    // What may come next: a key or `}` right after `{`; `,` or `}` after a member's value;
    // after a key, `:` then `{`.
    #[derive(PartialEq)]
    enum Next {
        KeyOrClose,
        CommaOrClose,
    }
    if bytes.first() != Some(&b'{') {
        return false;
    }
    let mut next = Next::KeyOrClose;
    depth += 1;
    i += 1;
    while i < bytes.len() {
        match (bytes[i], &next) {
            (b'}', _) => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return i == bytes.len();
                }
                next = Next::CommaOrClose;
            }
            (b',', Next::CommaOrClose) => {
                i += 1;
                if bytes.get(i) != Some(&b'"') {
                    return false;
                }
                next = Next::KeyOrClose;
            }
            (b'"', Next::KeyOrClose) => {
                let Some(end) = scan::valid_string(bytes, i) else {
                    return false;
                };
                if bytes.get(end) != Some(&b':') || bytes.get(end + 1) != Some(&b'{') {
                    return false;
                }
                depth += 1;
                i = end + 2;
                next = Next::KeyOrClose;
            }
            _ => return false,
        }
    }
    false
}

/// Length of `value`'s compact JSON text, counted from its structure without writing it (a
/// string's escapes are counted as one byte each: close enough for a budget, and never more
/// than the text).
pub fn encoded_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => digits(u),
            (None, Some(i)) => 1 + digits(i.unsigned_abs()),
            _ => n.to_string().len(),
        },
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(encoded_len).sum::<usize>()
        }
        Value::Object(map) => {
            2 + map.len().saturating_sub(1)
                + map
                    .iter()
                    .map(|(k, v)| k.len() + 3 + encoded_len(v))
                    .sum::<usize>()
        }
    }
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::awkward_string;
    use proptest::prelude::*;
    use serde_json::json;

    proptest! {
        /// Every pointer finds what `Value::pointer` finds, mutable or not.
        #[test]
        fn at_should_agree_with_pointer(
            value in crate::testing::json_with(&["a", "b", "a/b", "m~n", "0", ""], &["x"]),
            steps in proptest::collection::vec(proptest::sample::select(vec!["a", "b", "a~1b", "m~0n", "0", "1", "01", "", "-", "+1"]), 0..4),
            leading_slash in any::<bool>(),
        ) {
            let pointer = if leading_slash || steps.is_empty() {
                steps.iter().map(|s| format!("/{s}")).collect::<String>()
            } else {
                steps.join("/")
            };
            prop_assert_eq!(value.at(&pointer), value.pointer(&pointer));
            let mut copy = value.clone();
            let mut other = value.clone();
            prop_assert_eq!(copy.at_mut(&pointer).map(|v| v.clone()), other.pointer_mut(&pointer).map(|v| v.clone()));
        }
    }

    proptest! {
        /// The writer's bytes are `serde_json`'s, for strings, keys and whole values.
        #[test]
        fn write_should_match_serde_json(
            text in awkward_string(),
            key in awkward_string(),
            value in crate::testing::json_with(&["a", "b\"c", "ключ"], &["x", "a\nb", "\u{1}"]),
            number in any::<f64>(),
        ) {
            let mut out = Vec::new();
            write_str(&mut out, &text);
            prop_assert_eq!(&out, &serde_json::to_vec(&text).expect("json"));
            let object = json!({ key: [text, value, number] });
            let mut out = Vec::new();
            write(&mut out, &object);
            prop_assert_eq!(out, serde_json::to_vec(&object).expect("json"));
        }

        /// Eight at a time finds the same first byte as one at a time.
        #[test]
        fn first_escape_should_find_the_first_byte_to_escape(text in awkward_string()) {
            let bytes = text.as_bytes();
            let naive = bytes.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\');
            prop_assert_eq!(first_escape(bytes), naive);
        }
    }

    #[test]
    fn at_should_find_items_and_escaped_keys() {
        let value =
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}, "a/b": {"c~d": 1}});
        assert_eq!(value.at("/spec/containers/1/name"), Some(&json!("b")));
        assert_eq!(value.at("/a~1b/c~0d"), Some(&json!(1)));
        assert_eq!(value.at("/spec/containers/01"), None);
        assert_eq!(value.at(""), Some(&value));
    }
}
