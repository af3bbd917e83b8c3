//! What kube-apiserver's defaulters share: setting a field only when it is unset, as the
//! `SetDefaults_*` functions of `pkg/apis/<group>/v1` do. Each kind's defaults are in its
//! strategy (`Strategy::default`).
//!
//! A field counts as unset when it is absent, `null`, or the Go zero value of a value field
//! (`""`); pointers set to zero are kept.

use serde_json::{Value, json};

/// The object at `key` of `parent`, created (as `{}`) when unset.
pub fn child<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    if !parent.get(key).is_some_and(Value::is_object) {
        parent[key] = json!({});
    }
    // Not `&mut parent[key]`, which allocates the key to look it up.
    match parent.get_mut(key) {
        Some(found) => found,
        None => unreachable!("`{key}` was just set"),
    }
}

/// The list at `parent.key`, created when unset.
pub fn child_list<'a>(parent: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !parent.get(key).is_some_and(Value::is_array) {
        parent[key] = json!([]);
    }
    match parent.get_mut(key) {
        Some(Value::Array(items)) => items,
        _ => unreachable!("set to an array above"),
    }
}

/// Whether `parent.key` is unset: absent, `null` or `""`.
pub fn unset(parent: &Value, key: &str) -> bool {
    parent.get(key).is_none_or(is_unset)
}

/// Whether a present value counts as unset: `null` or `""`.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// Set `parent.key` to `value` when it is unset.
pub fn set(parent: &mut Value, key: &str, value: Value) {
    let Some(map) = parent.as_object_mut() else {
        return;
    };
    // One lookup for a field that is there; the key is allocated only when it is not.
    match map.get_mut(key) {
        Some(slot) if is_unset(slot) => *slot = value,
        Some(_) => {}
        None => {
            map.insert(key.to_owned(), value);
        }
    }
}

/// Each object of the list at `parent.key`.
pub fn each<'a>(parent: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    parent
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|item| item.is_object())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unset_fields_should_be_set() {
        let mut object = json!({"a": "", "b": null, "c": 0, "d": "x"});
        for key in ["a", "b", "c", "d", "e"] {
            set(&mut object, key, json!("default"));
        }
        assert_eq!(
            object,
            json!({"a": "default", "b": "default", "c": 0, "d": "x", "e": "default"})
        );
        child_list(child(&mut object, "f"), "items").push(json!({"n": 1}));
        assert_eq!(each(&mut object["f"], "items").count(), 1);
        assert!(unset(&object, "g") && !unset(&object, "f"));
    }
}
