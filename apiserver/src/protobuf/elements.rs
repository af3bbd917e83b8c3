//! How many values a protobuf message holds, counted on the wire before it is decoded.
//!
//! Decoding turns every value into a reflected value and then a JSON value, each tens of bytes:
//! a packed repeated field spends one byte per number on the wire, so 3 MiB of packed varints
//! became 3 million values and ~150 MB of memory per request (eight at once: +1 GB). Counting
//! first, with the message's descriptor to tell sub-messages and packed fields from strings and
//! bytes, bounds what one body can make the server allocate ([`MAX_ELEMENTS`]).

use prost_reflect::{Kind, MessageDescriptor};

/// Most values one protobuf body may hold (fields, list elements, map entries, at every depth):
/// far above any object within the 1.5 MiB a stored object may have, far below what makes
/// decoding a memory bomb.
pub const MAX_ELEMENTS: usize = 250_000;

/// Deepest nesting of messages followed (protobuf's own default recursion limit).
const MAX_DEPTH: usize = 100;

/// Why a body's values could not be counted.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    /// More than the budget.
    #[error("it holds more than {MAX_ELEMENTS} values (fields, list elements, map entries)")]
    TooMany,
    /// Broken wire format, or nesting deeper than protobuf allows.
    #[error("{0}")]
    Malformed(String),
}

impl From<String> for CountError {
    fn from(problem: String) -> Self {
        CountError::Malformed(problem)
    }
}

impl From<&str> for CountError {
    fn from(problem: &str) -> Self {
        CountError::Malformed(problem.to_owned())
    }
}

/// Count the values of `bytes`, a `descriptor` message, against [`MAX_ELEMENTS`].
///
/// # Errors
///
/// [`CountError`].
pub fn count(descriptor: &MessageDescriptor, bytes: &[u8]) -> Result<(), CountError> {
    let mut budget = MAX_ELEMENTS;
    walk(Some(descriptor), bytes, &mut budget, 0)
}

fn spend(budget: &mut usize, values: usize) -> Result<(), CountError> {
    *budget = budget.checked_sub(values).ok_or(CountError::TooMany)?;
    Ok(())
}

fn walk(
    descriptor: Option<&MessageDescriptor>,
    mut bytes: &[u8],
    budget: &mut usize,
    depth: usize,
) -> Result<(), CountError> {
    if depth > MAX_DEPTH {
        return Err(format!("messages nested deeper than {MAX_DEPTH}").into());
    }
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number =
            u32::try_from(key >> 3).map_err(|_| CountError::from("a field number out of range"))?;
        let field = descriptor.and_then(|d| d.get_field(number));
        spend(budget, 1)?;
        match key & 7 {
            0 => {
                varint(&mut bytes)?;
            }
            1 => bytes = take(bytes, 8)?.1,
            5 => bytes = take(bytes, 4)?.1,
            2 => {
                let len = usize::try_from(varint(&mut bytes)?)
                    .map_err(|_| CountError::from("a length too large"))?;
                let (value, rest) = take(bytes, len)?;
                bytes = rest;
                match field.as_ref().map(|f| f.kind()) {
                    Some(Kind::Message(inner)) => walk(Some(&inner), value, budget, depth + 1)?,
                    // A packed list: one value per varint, or per fixed-size number.
                    Some(kind) if field.as_ref().is_some_and(|f| f.is_list()) => {
                        let values = match kind {
                            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => value.len() / 8,
                            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => value.len() / 4,
                            Kind::String | Kind::Bytes => 0,
                            _ => value.iter().filter(|b| **b < 0x80).count(),
                        };
                        spend(budget, values)?;
                    }
                    _ => {}
                }
            }
            other => return Err(format!("wire type {other} is not supported").into()),
        }
    }
    Ok(())
}

/// The first `len` bytes and the rest.
fn take(bytes: &[u8], len: usize) -> Result<(&[u8], &[u8]), String> {
    if len > bytes.len() {
        return Err("a field runs past the end of the message".into());
    }
    Ok(bytes.split_at(len))
}

/// A base-128 varint, advancing `bytes` past it.
fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Ok(value);
        }
    }
    Err("a varint is broken".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_should_read_as_protobuf_writes_them() {
        let mut bytes: &[u8] = &[0xac, 0x02, 0x01];
        assert_eq!(varint(&mut bytes), Ok(300));
        assert_eq!(bytes, &[0x01]);
        let mut broken: &[u8] = &[0x80, 0x80];
        assert!(varint(&mut broken).is_err());
    }

    #[test]
    fn unknown_fields_should_count_once_each() {
        // Field 1 varint, field 2 a 3-byte string: two values.
        let mut budget = 10;
        walk(
            None,
            &[0x08, 0x96, 0x01, 0x12, 0x03, b'a', b'b', b'c'],
            &mut budget,
            0,
        )
        .expect("well formed");
        assert_eq!(budget, 8);
        let mut budget = 1;
        assert_eq!(
            walk(None, &[0x08, 0x01, 0x08, 0x02], &mut budget, 0),
            Err(CountError::TooMany)
        );
    }

    #[test]
    fn a_packed_list_should_count_a_value_per_number() {
        let descriptor = super::super::pool()
            .get_message_by_name("api.core.v1.PodSecurityContext")
            .expect("PodSecurityContext");
        // supplementalGroups (field 4) packed: 300 000 varints in 300 KB.
        let numbers = vec![1u8; 300_000];
        let mut bytes = vec![0x22];
        let mut len = numbers.len();
        while len >= 0x80 {
            bytes.push((len as u8) | 0x80);
            len >>= 7;
        }
        bytes.push(len as u8);
        bytes.extend_from_slice(&numbers);
        assert_eq!(count(&descriptor, &bytes), Err(CountError::TooMany));
        assert_eq!(
            count(&descriptor, &bytes[..4]),
            Err(CountError::Malformed(
                "a field runs past the end of the message".into()
            ))
        );
    }
}
