//! YAML input, bounded before the parser sees it: request bodies here, manifests and object files
//! in the host.
//!
//! libyaml (the scanner under `serde_yaml_ng`) keeps a possible simple key for every open flow
//! collection and re-checks all of them on every token, so `x: [[[[…]]]]` costs O(depth²) before
//! serde's recursion limit (128 levels) is ever reached: 160 KB of brackets took 15 s of one
//! core. kube-apiserver's YAML decoder was fixed the same way after CVE-2019-11253 (a flow depth
//! cap and linear simple-key bookkeeping). [`check_depth`] runs libyaml's own scanner — the one
//! the parse will run, so quotes, comments, plain and block scalars are told apart exactly as
//! they will be — over the text, counting flow collections as its tokens open and close them,
//! and stops at the first one deeper than [`MAX_FLOW_DEPTH`]. Its tokens come out at most
//! 1 024 characters behind the text it has read (that is how long a simple key stays possible),
//! so it stops within about 1 200 characters of a deep run, and a text within the limit costs
//! at most [`MAX_FLOW_DEPTH`] checks per token. Nothing that could be decoded is refused: a
//! value nested deeper than serde's recursion limit fails to decode anyway.

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

/// Refuse `text` when its flow collections nest deeper than [`MAX_FLOW_DEPTH`], as libyaml's
/// scanner reads them. Text the scanner cannot read is let through: the parse that follows
/// reports the error in its own words.
///
/// # Errors
///
/// [`YamlError::TooDeep`] with the line where the limit was passed.
pub fn check_depth(text: &[u8]) -> Result<(), YamlError> {
    match deepest_line(text) {
        Some(line) => Err(YamlError::TooDeep { line }),
        None => Ok(()),
    }
}

/// The 1-based line of the first flow collection deeper than [`MAX_FLOW_DEPTH`], if any.
#[allow(unsafe_code)] // libyaml's scanner is a C API translated to Rust: raw pointers only
fn deepest_line(text: &[u8]) -> Option<usize> {
    use std::mem::MaybeUninit;
    use unsafe_libyaml as unsafe_yaml;
    // SAFETY: the parser and each token live on this stack frame; the parser is initialised
    // before use and deleted once, every token the scanner produced is deleted once, and the
    // input slice outlives the parser (both end with this call).
    unsafe {
        let mut parser = MaybeUninit::<unsafe_yaml::yaml_parser_t>::uninit();
        if !unsafe_yaml::yaml_parser_initialize(parser.as_mut_ptr()).ok {
            return None;
        }
        let parser = parser.as_mut_ptr();
        unsafe_yaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        let mut depth = 0usize;
        let mut found = None;
        loop {
            let mut token = MaybeUninit::<unsafe_yaml::yaml_token_t>::uninit();
            if !unsafe_yaml::yaml_parser_scan(parser, token.as_mut_ptr()).ok {
                break;
            }
            let token = token.as_mut_ptr();
            let kind = (*token).type_;
            let line = (*token).start_mark.line;
            unsafe_yaml::yaml_token_delete(token);
            match kind {
                unsafe_yaml::YAML_FLOW_SEQUENCE_START_TOKEN
                | unsafe_yaml::YAML_FLOW_MAPPING_START_TOKEN => {
                    depth += 1;
                }
                unsafe_yaml::YAML_FLOW_SEQUENCE_END_TOKEN
                | unsafe_yaml::YAML_FLOW_MAPPING_END_TOKEN => {
                    depth = depth.saturating_sub(1);
                }
                // The end, or nothing more (a scanner error leaves an empty token).
                unsafe_yaml::YAML_STREAM_END_TOKEN | unsafe_yaml::YAML_NO_TOKEN => break,
                _ => {}
            }
            if depth > MAX_FLOW_DEPTH {
                found = Some(
                    usize::try_from(line)
                        .unwrap_or(usize::MAX)
                        .saturating_add(1),
                );
                break;
            }
        }
        unsafe_yaml::yaml_parser_delete(parser);
        found
    }
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
    fn check_depth_should_read_quotes_comments_and_scalars_as_libyaml_does() {
        let brackets = "[".repeat(1000);
        let text = format!(
            "a: \"{brackets}\"\nb: '{brackets}''{brackets}'\n# {brackets}\nc: x{brackets}\nd: [\"]]]\", '}}}}', [1]]\ne: |\n  {brackets}\n"
        );
        check_depth(text.as_bytes()).expect("nothing deep");
        let value: serde_json::Value = from_slice(text.as_bytes()).expect("decodes");
        assert_eq!(value["d"][2][0], 1);
    }

    #[test]
    fn check_depth_should_not_be_fooled_by_what_only_looks_like_a_string_or_a_comment() {
        // Each hides a deep run from a scanner that takes a quote or `#` for more than libyaml
        // does: a quote inside a plain scalar, `#` inside a flow scalar, a quote after `?`, a
        // quote inside a block scalar closed further down.
        let deep = format!("{}{}", "[".repeat(600), "]".repeat(600));
        for text in [
            format!("a: don 't\nb: {deep}\nc: x'\n"),
            format!("x: [a:#, {deep}]\n"),
            format!("x: [?\"]\",{deep}]\n"),
            format!("a: |\n  say \"\nb: {deep}\nc: x\"\n"),
        ] {
            assert!(
                matches!(check_depth(text.as_bytes()), Err(YamlError::TooDeep { .. })),
                "{text:.40}"
            );
        }
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
