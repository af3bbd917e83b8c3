//! A response's `Warning` headers, deduplicated and truncated as kube-apiserver's warning
//! recorder (`k8s.io/apiserver/pkg/endpoints/filters/warning.go`) does them.
//!
//! Warnings come from field validation, deprecations and every admission webhook a write
//! passed; a webhook may return thousands. Each distinct text is sent once; once their text
//! passes [`TRUNCATE_AT_TOTAL_CHARS`] characters in all, every warning is cut to
//! [`TRUNCATE_ITEM_CHARS`] and those past the total are left out. A text that cannot be a
//! header (a control character) is left out, as kube's `NewWarningHeader` refuses it.

use axum::http::HeaderValue;

/// Characters of warning text after which warnings are truncated (kube's
/// `truncateAtTotalRunes`).
pub const TRUNCATE_AT_TOTAL_CHARS: usize = 4 * 1024;
/// Characters each warning is cut to once truncating (kube's `truncateItemRunes`).
pub const TRUNCATE_ITEM_CHARS: usize = 256;

/// The `Warning` header values for `warnings`, in order (see the [module docs](self)).
pub fn headers(warnings: &[String]) -> Vec<HeaderValue> {
    let mut recorder = Recorder::default();
    for warning in warnings {
        recorder.add(warning);
    }
    recorder.headers
}

/// kube-apiserver's recorder: what it has seen and written.
#[derive(Default)]
struct Recorder<'a> {
    seen: std::collections::HashSet<&'a str>,
    ordered: Vec<&'a str>,
    written: usize,
    truncating: bool,
    headers: Vec<HeaderValue>,
}

impl<'a> Recorder<'a> {
    fn add(&mut self, text: &'a str) {
        if text.is_empty() || (self.truncating && self.written >= TRUNCATE_AT_TOTAL_CHARS) {
            return;
        }
        if !self.seen.insert(text) {
            return;
        }
        self.ordered.push(text);
        let (cut, chars) = if self.truncating {
            truncated(text)
        } else {
            (text, text.chars().count())
        };
        let Some(value) = header(cut) else { return };
        if self.truncating || self.written + chars <= TRUNCATE_AT_TOTAL_CHARS {
            self.written += chars;
            self.headers.push(value);
            return;
        }
        // Over the total for the first time: start again, every warning cut.
        self.truncating = true;
        self.written = 0;
        self.headers.clear();
        tracing::debug!("exceeded max warning header size, truncating");
        for text in &self.ordered {
            let (cut, chars) = truncated(text);
            if let Some(value) = header(cut) {
                self.written += chars;
                self.headers.push(value);
            }
        }
    }
}

/// `text` cut to [`TRUNCATE_ITEM_CHARS`] characters, and its length in characters.
fn truncated(text: &str) -> (&str, usize) {
    match text.char_indices().nth(TRUNCATE_ITEM_CHARS) {
        Some((end, _)) => (&text[..end], TRUNCATE_ITEM_CHARS),
        None => (text, text.chars().count()),
    }
}

/// `299 - "text"`, the text quoted; `None` for text with control characters.
fn header(text: &str) -> Option<HeaderValue> {
    if text.chars().any(|c| c.is_control() && c != '\t') {
        return None;
    }
    HeaderValue::from_str(&format!("299 - {}", serde_json::Value::String(text.into()))).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(headers: &[HeaderValue]) -> Vec<String> {
        headers
            .iter()
            .map(|h| h.to_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn headers_should_dedupe_and_refuse_control_characters() {
        let warnings = ["a", "b", "a", "", "x\ny"].map(String::from);
        assert_eq!(texts(&headers(&warnings)), [r#"299 - "a""#, r#"299 - "b""#]);
    }

    #[test]
    fn headers_should_truncate_past_the_total_as_kube_does() {
        // Sixteen of 255 characters fit (4 080); the seventeenth starts truncating: all are
        // replayed cut to 256, and the total then stops new ones.
        let long = |i: usize| format!("{i:03}{}", "é".repeat(400));
        let warnings: Vec<String> = (0..2000).map(long).collect();
        let sent = headers(&warnings);
        assert_eq!(sent.len(), TRUNCATE_AT_TOTAL_CHARS / TRUNCATE_ITEM_CHARS);
        let first = sent[0].to_str().map(str::len).unwrap_or_default();
        assert!(first < 600, "cut to 256 characters: {first} bytes");
        let short: Vec<String> = (0..2000).map(|i| format!("{i:04}")).collect();
        let sent = headers(&short);
        // 1 024 fit exactly; the next starts truncating, which replays all (none is cut).
        assert_eq!(sent.len(), 1025);
        let total: usize = sent.iter().map(|h| h.len()).sum();
        assert!(total < 16 << 10, "{total} bytes of headers");
    }

    #[test]
    fn headers_should_keep_everything_under_the_total() {
        let warnings: Vec<String> = (0..10).map(|i| format!("warning {i}")).collect();
        assert_eq!(headers(&warnings).len(), 10);
    }
}
