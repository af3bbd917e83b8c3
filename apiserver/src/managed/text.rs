//! `FieldsV1` as stored objects keep it — compact JSON text, keys in order — read and changed
//! without building JSON maps: a write that takes fields from an entry or adds them walks the
//! entry's text beside the [`FieldSet`] once (each byte read once) and writes the new text.
//!
//! Each function matches the [`FieldSet`] operation it is named after (the property tests
//! check that they do). `FieldsV1` is a JSON object whose members are all JSON objects; text of
//! any other shape (never text the server wrote) reads as having no member past the point
//! where it stops being that.

use std::borrow::Cow;
use std::cmp::Ordering;

use krec_core::json::scan;

use super::FieldSet;

/// A reader of `FieldsV1` text.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Cursor { text, at: 0 }
    }

    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while self.at < bytes.len() && bytes[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
        bytes.get(self.at).copied()
    }

    /// Enter the object at the cursor; `false` (nothing read) when there is none.
    fn open(&mut self) -> bool {
        if self.peek() == Some(b'{') {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// The next member's key — as written (with its quotes) and unescaped — with the cursor
    /// left on its value; `None` after the object's last member (its `}` read).
    fn key(&mut self) -> Option<(&'a str, Cow<'a, str>)> {
        if self.peek() == Some(b',') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'"') => {}
            Some(b'}') => {
                self.at += 1;
                return None;
            }
            _ => {
                self.at = self.text.len();
                return None;
            }
        }
        let start = self.at;
        let end = self.string_end(start)?;
        self.at = end;
        if self.peek() != Some(b':') {
            self.at = self.text.len();
            return None;
        }
        self.at += 1;
        let raw = &self.text[start..end];
        Some((raw, unescape(&raw[1..raw.len() - 1])))
    }

    /// Past the JSON string opening at `from` (the cursor at the end when it never closes).
    fn string_end(&mut self, from: usize) -> Option<usize> {
        let end = scan::string(self.text.as_bytes(), from);
        if end.is_none() {
            self.at = self.text.len();
        }
        end
    }

    /// Read past the value at the cursor, returning its text (empty at a separator; the rest
    /// of the text when it never ends).
    fn skip_value(&mut self) -> &'a str {
        self.peek();
        let start = self.at;
        let bytes = self.text.as_bytes();
        let end = match bytes.get(start) {
            None | Some(b',' | b'}' | b']' | b':') => start,
            Some(_) => scan::value(bytes, start).unwrap_or(bytes.len()),
        };
        self.at = end;
        &self.text[start..end]
    }
}

/// The inside of a JSON string, unescaped (borrowed when it has no escape).
fn unescape(inside: &str) -> Cow<'_, str> {
    if !inside.contains('\\') {
        return Cow::Borrowed(inside);
    }
    match serde_json::from_str::<String>(&format!("\"{inside}\"")) {
        Ok(text) => Cow::Owned(text),
        Err(_) => Cow::Borrowed(inside),
    }
}

/// The text of a JSON object, member by member (`"key":value` each, as given).
struct Writer {
    out: String,
    first: bool,
}

impl Writer {
    fn new(capacity: usize) -> Self {
        let mut out = String::with_capacity(capacity);
        out.push('{');
        Writer { out, first: true }
    }

    fn member(&mut self, raw_key: &str, value: &str) {
        if !std::mem::take(&mut self.first) {
            self.out.push(',');
        }
        self.out.push_str(raw_key);
        self.out.push(':');
        self.out.push_str(value);
    }

    fn member_escaped(&mut self, key: &str, value: &str) {
        let mut raw = String::with_capacity(key.len() + 2);
        raw.push('"');
        super::push_escaped(&mut raw, key);
        raw.push('"');
        self.member(&raw, value);
    }

    fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// `text` without `set`'s members (and what is under them). Returns the new text when
/// anything went (`None`: `text` is unchanged), and whether something went from the top and
/// that left no member (as `FieldSet::subtract` with the "emptied" the entry's removal needs).
pub(super) fn subtract(text: &str, set: &FieldSet) -> (Option<String>, bool) {
    let mut cursor = Cursor::new(text);
    let (rest, emptied) = subtract_at(&mut cursor, set);
    (rest.map(|w| w.finish()), emptied)
}

fn subtract_at(cursor: &mut Cursor<'_>, set: &FieldSet) -> (Option<Writer>, bool) {
    let start = cursor.at;
    if !cursor.open() {
        cursor.skip_value();
        return (None, false);
    }
    let mut writer = Writer::new(cursor.text.len() - start);
    let mut changed = false;
    let mut removed = false;
    while let Some((raw_key, key)) = cursor.key() {
        match set.children.get(key.as_ref()) {
            Some(theirs) if theirs.itself || theirs.children.is_empty() => {
                cursor.skip_value();
                changed = true;
                removed = true;
            }
            Some(theirs) => {
                let value_start = cursor.at;
                match subtract_at(cursor, theirs) {
                    (_, true) => {
                        changed = true;
                        removed = true;
                    }
                    (Some(child), false) => {
                        changed = true;
                        writer.member(raw_key, &child.finish());
                    }
                    (None, false) => writer.member(raw_key, &cursor.text[value_start..cursor.at]),
                }
            }
            None => {
                let value = cursor.skip_value();
                writer.member(raw_key, value);
            }
        }
    }
    let emptied = removed && writer.first;
    (changed.then_some(writer), emptied)
}

/// `text` with `set`'s members added (`root`: the top of an entry, which has no `.` of its
/// own; below it, a node that was a member itself or that `set` has as a member keeps a `.`
/// beside its children), as [`FieldSet::union`].
pub(super) fn union(text: &str, set: &FieldSet, root: bool) -> String {
    union_at(&mut Cursor::new(text), set, root)
}

fn union_at(cursor: &mut Cursor<'_>, set: &FieldSet, root: bool) -> String {
    let opened = cursor.open();
    let mut writer = Writer::new(cursor.text.len() + 64);
    let mut theirs = set
        .children
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .peekable();
    let mut mine = if opened { cursor.key() } else { None };
    if !opened {
        cursor.skip_value();
    }
    let text_empty = mine.is_none();
    let mut has_dot = false;
    loop {
        let order = match (&mine, theirs.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((_, key)), Some((other, _))) => key.as_ref().cmp(other.as_str()),
        };
        match order {
            Ordering::Less => {
                if let Some((raw_key, key)) = mine.take() {
                    has_dot |= key == ".";
                    let value = cursor.skip_value();
                    writer.member(raw_key, value);
                }
                mine = cursor.key();
            }
            Ordering::Equal => {
                if let (Some((raw_key, _)), Some((_, child))) = (mine.take(), theirs.next()) {
                    if cursor.peek() == Some(b'{') {
                        let united = union_at(cursor, child, false);
                        writer.member(raw_key, &united);
                    } else {
                        cursor.skip_value();
                        writer.member(raw_key, &child.to_fields_v1().to_string());
                    }
                }
                mine = cursor.key();
            }
            Ordering::Greater => {
                if let Some((key, child)) = theirs.next() {
                    writer.member_escaped(key, &child.to_fields_v1().to_string());
                }
            }
        }
    }
    let was_member = !root && (text_empty || has_dot);
    let mut out = writer.finish();
    // `.` sorts before every other key (`f:`, `k:`, `v:`, `i:`): it goes first.
    if !root && !has_dot && (was_member || set.itself) && out.len() > 2 {
        out.insert_str(1, "\".\":{},");
    }
    out
}

/// The members of `set` that `text` also has, below the top (a node is a member when it is
/// a leaf or has `.`), as [`FieldSet`]'s intersection.
pub(super) fn members_in_both(text: &str, set: &FieldSet) -> FieldSet {
    members_in_both_at(&mut Cursor::new(text), set)
}

fn members_in_both_at(cursor: &mut Cursor<'_>, set: &FieldSet) -> FieldSet {
    if !cursor.open() {
        // Not an object: read as `{}`, a leaf.
        cursor.skip_value();
        return FieldSet {
            itself: set.itself || set.children.is_empty(),
            ..Default::default()
        };
    }
    let mut member = cursor.key();
    let leaf_or_dot = member.as_ref().is_none_or(|(_, key)| key == ".");
    let mut out = FieldSet {
        itself: (set.itself || set.children.is_empty()) && leaf_or_dot,
        ..Default::default()
    };
    while let Some((_, key)) = member {
        match set.children.get(key.as_ref()) {
            Some(theirs) => {
                let child = members_in_both_at(cursor, theirs);
                if !child.is_empty() {
                    out.children.insert(key.into_owned(), child);
                }
            }
            None => {
                cursor.skip_value();
            }
        }
        member = cursor.key();
    }
    out
}

/// Whether `text` has exactly `path` as a member (a leaf, or a node with `.`), as
/// [`FieldSet::contains`].
pub(super) fn contains(text: &str, path: &[String]) -> bool {
    let mut cursor = Cursor::new(text);
    for (i, element) in path.iter().enumerate() {
        if !cursor.open() {
            return false;
        }
        loop {
            match cursor.key() {
                Some((_, key)) if key == element.as_str() => break,
                Some(_) => {
                    cursor.skip_value();
                }
                None => return false,
            }
        }
        if cursor.peek() != Some(b'{') {
            // A malformed member is a leaf.
            return i + 1 == path.len();
        }
    }
    if !cursor.open() {
        return false;
    }
    cursor.key().is_none_or(|(_, key)| key == ".")
}
