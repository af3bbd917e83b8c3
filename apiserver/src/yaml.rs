//! YAML input, bounded before the parser sees it: request bodies here, manifests and object files
//! in the host.
//!
//! libyaml (the scanner under `serde_yaml_ng`) keeps a possible simple key for every open flow
//! collection and re-checks all of them on every token, so `x: [[[[…]]]]` costs O(depth²) before
//! serde's recursion limit (128 levels) is ever reached: 160 KB of brackets took 15 s of one
//! core. kube-apiserver's YAML decoder was fixed the same way after CVE-2019-11253 (a flow depth
//! cap and linear simple-key bookkeeping). [`check_depth`] scans the text once, counting flow
//! collections as a YAML scanner opens them, and refuses text nested deeper than
//! [`MAX_FLOW_DEPTH`]: with it, libyaml's work per token is bounded and a 3 MiB body parses in
//! linear time. Nothing that could be decoded is refused: a value nested deeper than serde's
//! recursion limit fails to decode anyway.

use serde::de::DeserializeOwned;

/// Deepest nesting of flow collections (`[…]`, `{…}`) accepted: serde's recursion limit, so a
/// document refused here could not have been decoded.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Why YAML text was refused.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// Flow collections nested deeper than [`MAX_FLOW_DEPTH`].
    #[error("exceeded max depth of {MAX_FLOW_DEPTH} at line {line}")]
    TooDeep {
        /// The 1-based line where the limit was passed.
        line: usize,
    },
    /// Not valid YAML, or not the expected shape.
    #[error(transparent)]
    Syntax(#[from] serde_yaml_ng::Error),
}

/// Refuse `text` when its flow collections nest deeper than [`MAX_FLOW_DEPTH`].
///
/// The count follows the scanner's rules closely enough to never undercount: comments and quoted
/// scalars are skipped; in block context a bracket opens a collection only where a token can
/// start (after blank space or at a line's start), so `name: a[0` is a plain scalar; inside a
/// flow collection every bracket counts. Brackets in block scalars (`|`, `>`) are counted as if
/// they were flow, which can only overcount text that is unbalanced by more than the limit.
///
/// # Errors
///
/// [`YamlError::TooDeep`] with the line where the limit was passed.
pub fn check_depth(text: &[u8]) -> Result<(), YamlError> {
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut i = 0usize;
    // Whether a token may start here: at the start, after blank space, and (in flow context)
    // after an indicator.
    let mut token_start = true;
    while i < text.len() {
        let byte = text[i];
        let starts = token_start;
        token_start = false;
        match byte {
            b'\n' => {
                line += 1;
                token_start = true;
            }
            b' ' | b'\t' | b'\r' => token_start = true,
            b'#' if starts => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' if starts => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    match text[i] {
                        b'\\' => i += 1,
                        b'\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'\'' if starts => {
                i += 1;
                while i < text.len() {
                    match text[i] {
                        b'\'' if text.get(i + 1) == Some(&b'\'') => i += 1,
                        b'\'' => break,
                        b'\n' => line += 1,
                        _ => {}
                    }
                    i += 1;
                }
            }
            b'[' | b'{' if starts || depth > 0 => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(YamlError::TooDeep { line });
                }
                token_start = true;
            }
            b']' | b'}' if depth > 0 => depth -= 1,
            b',' | b':' if depth > 0 => token_start = true,
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Decode one YAML document, after [`check_depth`].
///
/// # Errors
///
/// [`YamlError::TooDeep`] or the parser's error.
pub fn from_slice<T: DeserializeOwned>(text: &[u8]) -> Result<T, YamlError> {
    check_depth(text)?;
    Ok(serde_yaml_ng::from_slice(text)?)
}

/// Every document of a YAML stream, after [`check_depth`]: the stream's deserializers, for the
/// caller to decode one by one.
///
/// # Errors
///
/// [`YamlError::TooDeep`].
pub fn documents(text: &str) -> Result<serde_yaml_ng::Deserializer<'_>, YamlError> {
    check_depth(text.as_bytes())?;
    Ok(serde_yaml_ng::Deserializer::from_str(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("x: {}1{}\n", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn check_depth_should_refuse_flow_nesting_past_the_limit() {
        assert!(check_depth(nested(MAX_FLOW_DEPTH).as_bytes()).is_ok());
        let err = check_depth(nested(MAX_FLOW_DEPTH + 1).as_bytes()).expect_err("too deep");
        assert!(matches!(err, YamlError::TooDeep { line: 1 }), "{err}");
        let json = format!("{}{}", "{\"a\":".repeat(200), "}".repeat(200));
        assert!(check_depth(json.as_bytes()).is_err());
    }

    #[test]
    fn check_depth_should_skip_quoted_text_comments_and_plain_scalars() {
        let brackets = "[".repeat(1000);
        let text = format!(
            "a: \"{brackets}\"\nb: '{brackets}''{brackets}'\n# {brackets}\nc: x{brackets}\nd: [\"]]]\", '}}}}', [1]]\n"
        );
        check_depth(text.as_bytes()).expect("nothing deep");
        let value: serde_json::Value = from_slice(text.as_bytes()).expect("decodes");
        assert_eq!(value["d"][2][0], 1);
    }

    #[test]
    fn check_depth_should_count_every_bracket_inside_flow_collections() {
        // Inside a flow collection a bracket after any character opens a collection.
        let text = format!("a: [x,{}]\n", "[".repeat(MAX_FLOW_DEPTH));
        assert!(check_depth(text.as_bytes()).is_err());
    }

    #[test]
    fn nothing_decodable_should_be_refused() {
        // The deepest value serde decodes is well within the limit.
        for depth in [100, 127, 128] {
            let text = nested(depth);
            let decoded = serde_yaml_ng::from_str::<serde_json::Value>(&text);
            let checked = check_depth(text.as_bytes());
            assert!(decoded.is_err() || checked.is_ok(), "depth {depth}");
        }
    }
}
