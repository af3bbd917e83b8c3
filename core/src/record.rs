//! Kubernetes Events a guest records, and text a guest supplies: cut to a size, made safe to
//! print.

use crate::Gvk;

/// Kind of a Kubernetes Event, as client-go's `EventRecorder` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Normal progress, e.g. reason `Synced`.
    Normal,
    /// Something a person should look at, e.g. reason `ErrResourceExists`.
    Warning,
}

impl EventType {
    /// The Event's `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectReference {
    /// Kind of the object.
    pub gvk: Gvk,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// UID, if known.
    pub uid: Option<String>,
}

/// An Event to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The object the Event is about.
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Short CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The component reporting it: the guest's name.
    pub reporter: String,
}

/// Cut `text` to at most `max` bytes on a character boundary; whether anything was cut.
pub fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    true
}

/// `text` with every control character escaped (`\n`, `\r`, `\u{1b}`, …), and the Unicode
/// direction overrides that can make a line read other than it is, so that text a guest
/// supplies (a log message, an error, a name) stays on its own line in the host's log and
/// cannot forge another. Borrowed when there is nothing to escape (the common case).
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    // Printable ASCII and tabs, the common case, need no look at characters.
    if text
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) || b == b'\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_should_escape_what_could_forge_a_line() {
        assert!(matches!(
            printable("plain é\ttab"),
            std::borrow::Cow::Borrowed(_)
        ));
        let forged =
            "ok\n2026-01-01T00:00:00Z ERROR krec::host: guest healthy stopped\r\u{1b}[2K\u{202e}";
        let shown = printable(forged);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\t'),
            "{shown}"
        );
        assert_eq!(
            shown,
            "ok\\n2026-01-01T00:00:00Z ERROR krec::host: guest healthy stopped\\r\\u{1b}[2K\\u{202e}"
        );
    }
}
