//! The workspace's one JSON scanner: where a JSON value, string or run of whitespace ends,
//! without decoding anything — what the guest SDK's `Lazy` walks a guest's objects with, the
//! host's cache cuts `managedFields` out of a cached object's text with, and the API server
//! reads `FieldsV1` text with. [`valid_string`] also checks what it passes (for text about to be
//! written out as JSON). Every function answers `None` past the end of the text; none
//! validates more than it says.

const ONES: u64 = u64::from_le_bytes([1; 8]);
const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);

/// The bytes of `word` equal to `byte`, as their high bits; the lowest one set is exact
/// (the classic word-at-a-time test: bits above the first match may be false).
#[inline]
fn matches(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The index of the first byte at or after `i` that is not JSON whitespace.
#[inline]
pub fn whitespace(bytes: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(i) {
        i += 1;
    }
    i
}

/// The index just after the string whose opening quote is at `i`.
#[inline]
pub fn string(bytes: &[u8], i: usize) -> Option<usize> {
    let mut i = i + 1;
    loop {
        // Eight bytes at a time to the first quote or backslash (few loop turns: guests
        // run with a check at every one).
        while let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().ok()?);
            let found = matches(word, b'"') | matches(word, b'\\');
            if found != 0 {
                i += (found.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        match *bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The index just after the value that starts at `i`.
#[inline]
pub fn value(bytes: &[u8], i: usize) -> Option<usize> {
    match *bytes.get(i)? {
        b'"' => string(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = i;
            loop {
                match *bytes.get(i)? {
                    b'"' => {
                        i = string(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        b',' | b'}' | b']' | b':' => None,
        _ => {
            let mut end = i;
            while let Some(byte) = bytes.get(end) {
                if matches!(byte, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                    break;
                }
                end += 1;
            }
            Some(end)
        }
    }
}

/// Past the JSON string opening at `from`, if it is one (valid escapes, no control
/// characters).
pub fn valid_string(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from + 1;
    loop {
        // Runs of plain bytes skipped eight at a time, to a quote, a backslash or a control
        // character (none: the string never closes).
        i += super::first_escape(bytes.get(i..)?)?;
        match bytes[i] {
            b'"' => return Some(i + 1),
            b'\\' => match bytes.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = bytes.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            // A control character.
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any JSON value, compact or pretty, ends where its text ends; inside an array, each
        /// element ends at its separator.
        #[test]
        fn a_value_should_end_where_its_text_does(
            value in crate::testing::json_with(&["a", "b\"c", "d\\e"], &["x", "]}", "\u{1}\u{e9}"]),
        ) {
            for text in [
                serde_json::to_string(&value).expect("compact"),
                serde_json::to_string_pretty(&value).expect("pretty"),
            ] {
                prop_assert_eq!(value_end(&text), Some(text.len()), "{}", text);
                let pair = format!("[{text} , 1]");
                let start = whitespace(pair.as_bytes(), 1);
                prop_assert_eq!(super::value(pair.as_bytes(), start), Some(1 + text.len()));
            }
        }

        /// Every string serde writes is valid, and ends where it does.
        #[test]
        fn written_strings_should_be_valid(text in crate::testing::awkward_string()) {
            let quoted = serde_json::to_string(&text).expect("string");
            prop_assert_eq!(valid_string(quoted.as_bytes(), 0), Some(quoted.len()));
            prop_assert_eq!(string(quoted.as_bytes(), 0), Some(quoted.len()));
        }
    }

    fn value_end(text: &str) -> Option<usize> {
        value(text.as_bytes(), 0)
    }

    #[test]
    fn malformed_text_should_end_nowhere() {
        for text in ["\"open", "{\"a\": [1, 2}", ",", "}", ""] {
            assert_eq!(value_end(text), None, "{text:?}");
        }
        assert_eq!(valid_string(br#""\q""#, 0), None);
        assert_eq!(valid_string(b"\"a\x01\"", 0), None);
    }
}
