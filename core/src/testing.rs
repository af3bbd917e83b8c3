//! Property-test strategies the workspace's crates share (feature `testing`).

use proptest::prelude::*;
use serde_json::Value;

/// JSON values a few levels deep: objects keyed from `keys` (a vocabulary that reaches the code
/// under test: field names, directives, schema keywords), leaves `null`, booleans, small and
/// arbitrary integers and strings from `strings`.
pub fn json_with(
    keys: &'static [&'static str],
    strings: &'static [&'static str],
) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0i64..4).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        proptest::sample::select(strings).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(proptest::sample::select(keys), inner, 0..4).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            ),
        ]
    })
}

/// Strings of every byte class the writer treats apart: plain ASCII, the escaped ones, other
/// control characters, DEL and multi-byte UTF-8, at every offset of an eight-byte word.
pub fn awkward_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => proptest::sample::select(vec!['"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}',
                '\u{0}', '\u{1f}', ' ', '!', '#', '[', ']', '\u{7f}', 'é', '€', '😀']),
        ],
        0..40,
    )
    .prop_map(|chars| chars.into_iter().collect())
}
