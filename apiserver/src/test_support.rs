//! What the crate's property tests share.

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
