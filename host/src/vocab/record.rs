//! Kubernetes Events a guest records, and cutting text to a size.

use super::Gvk;

/// Kind of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
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
