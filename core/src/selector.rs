//! Kubernetes label and field selectors: parsing and matching, as `k8s.io/apimachinery` does.
//!
//! Label selectors support `=`, `==`, `!=`, `in`, `notin`, existence (`key`), non-existence
//! (`!key`) and the numeric `>`/`<`; requirements are joined by commas and all must hold. Field
//! selectors support `metadata.name` and `metadata.namespace` with `=`, `==` and `!=`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::json::Pointer;

/// A selector that failed to parse; the message names the offending part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector {selector:?}: {problem}")]
pub struct SelectorError {
    /// The selector text.
    pub selector: String,
    /// What is wrong with it.
    pub problem: String,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`, `key==value`, or `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value` or `key notin (a,b)`: also true when the label is absent.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
    /// `key>n`: the label is an integer greater than n.
    GreaterThan(String, i64),
    /// `key<n`: the label is an integer less than n.
    LessThan(String, i64),
}

impl Requirement {
    /// A requirement object (`key`, `operator`, `values`) of a label selector's
    /// `matchExpressions` or a node selector term; `None` for an unknown operator or a `Gt`/`Lt`
    /// without one integer.
    pub fn from_json(expression: &Value) -> Option<Self> {
        let key = expression["key"].as_str().unwrap_or_default().to_owned();
        let values: Vec<String> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let number = || values.first().and_then(|v| v.parse::<i64>().ok());
        Some(match expression["operator"].as_str()? {
            "In" => Requirement::In(key, values),
            "NotIn" => Requirement::NotIn(key, values),
            "Exists" => Requirement::Exists(key),
            "DoesNotExist" => Requirement::DoesNotExist(key),
            "Gt" => Requirement::GreaterThan(key, number()?),
            "Lt" => Requirement::LessThan(key, number()?),
            _ => return None,
        })
    }

    /// Whether a set of labels (or fields) satisfies the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether the labels `label` looks up satisfy the requirement (no map built: the
    /// built-in controllers match every object of a namespace on every sync).
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        let as_int = |key: &str| label(key).and_then(|v| v.parse::<i64>().ok());
        let listed = |values: &[String], v: &str| values.iter().any(|w| w == v);
        match self {
            Requirement::In(key, values) => label(key).is_some_and(|v| listed(values, v)),
            Requirement::NotIn(key, values) => label(key).is_none_or(|v| !listed(values, v)),
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
            Requirement::GreaterThan(key, n) => as_int(key).is_some_and(|v| v > *n),
            Requirement::LessThan(key, n) => as_int(key).is_some_and(|v| v < *n),
        }
    }
}

/// A parsed label selector: all requirements must hold. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, in the order written.
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parse selector text such as `app=web,tier in (fe,be),!legacy`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let err = |problem: String| SelectorError {
            selector: text.to_owned(),
            problem,
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(err)? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement".into()));
            }
            requirements.push(parse_requirement(part).map_err(err)?);
        }
        Ok(LabelSelector { requirements })
    }

    /// A selector requiring each of `labels` (as a `matchLabels` map).
    pub fn from_match_labels(labels: &BTreeMap<String, String>) -> Self {
        LabelSelector {
            requirements: labels
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        }
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`), as
    /// `LabelSelectorAsSelector` reads it; `None` for an unknown operator. An empty selector
    /// (or one that is not an object) has no requirements and matches everything: callers for
    /// whom a missing selector must match nothing check for it first.
    pub fn from_json(selector: &Value) -> Option<Self> {
        let mut requirements: Vec<Requirement> = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                Requirement::In(k.clone(), vec![v.as_str().unwrap_or_default().to_owned()])
            })
            .collect();
        for e in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // `Gt` and `Lt` belong to node selectors, not label selectors.
            match Requirement::from_json(e)? {
                Requirement::GreaterThan(..) | Requirement::LessThan(..) => return None,
                requirement => requirements.push(requirement),
            }
        }
        Some(LabelSelector { requirements })
    }

    /// Whether a set of labels satisfies the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the labels `label` looks up satisfy the selector (no map built).
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
        self.requirements.iter().all(|r| r.matches_with(label))
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        // A label that is not a string is no label, as `object_labels` reads them.
        let labels = object.at("/metadata/labels").and_then(Value::as_object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|r| r.matches_with(label))
    }
}

/// The `metadata.labels` of a JSON object (empty when absent or malformed).
pub fn object_labels(object: &Value) -> BTreeMap<String, String> {
    object
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Split on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        validate_key(key)?;
        return Ok(Requirement::DoesNotExist(key.to_owned()));
    }
    for (op, build) in [
        (
            "!=",
            Requirement::NotIn as fn(String, Vec<String>) -> Requirement,
        ),
        ("==", Requirement::In),
        ("=", Requirement::In),
    ] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            validate_key(key)?;
            validate_value(value)?;
            return Ok(build(key.to_owned(), vec![value.to_owned()]));
        }
    }
    for (op, greater) in [(">", true), ("<", false)] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            validate_key(key)?;
            let n = value
                .parse::<i64>()
                .map_err(|_| format!("{value:?} is not an integer for {op}"))?;
            return Ok(if greater {
                Requirement::GreaterThan(key.to_owned(), n)
            } else {
                Requirement::LessThan(key.to_owned(), n)
            });
        }
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default().trim();
    let rest = words.next().unwrap_or_default().trim();
    validate_key(key)?;
    if rest.is_empty() {
        return Ok(Requirement::Exists(key.to_owned()));
    }
    let (op, set) = rest
        .split_once(|c: char| c == '(' || c.is_whitespace())
        .map(|(op, set)| (op.trim(), set))
        .ok_or_else(|| format!("expected 'in' or 'notin' after {key:?}"))?;
    let set = if rest[op.len()..].trim_start().starts_with('(') {
        rest[op.len()..].trim()
    } else {
        set.trim()
    };
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set of values after {op:?}"))?;
    let values = inner
        .split(',')
        .map(|v| {
            let v = v.trim();
            validate_value(v).map(|()| v.to_owned())
        })
        .collect::<Result<Vec<_>, _>>()?;
    match op {
        "in" => Ok(Requirement::In(key.to_owned(), values)),
        "notin" => Ok(Requirement::NotIn(key.to_owned(), values)),
        other => Err(format!("unknown operator {other:?}")),
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of up to 63 characters.
fn validate_key(key: &str) -> Result<(), String> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 || !is_dns_subdomain(prefix) {
                return Err(format!("invalid label key prefix {prefix:?}"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err("empty label key".into());
    }
    if !is_label_name(name) {
        return Err(format!(
            "invalid label key {key:?}: names are at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ));
    }
    Ok(())
}

/// Whether `key: value` is a valid label (the key as `validate_key`, the value empty or a
/// label name), checked without building anything.
pub fn is_label(key: &str, value: &str) -> bool {
    validate_key(key).is_ok() && validate_value(value).is_ok()
}

fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {value:?}: at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `s` is a DNS-1123 subdomain: dot-separated lowercase labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether `s` is a DNS-1123 label: at most 63 lowercase alphanumerics or '-', alphanumeric at
/// both ends.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// One field requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field label, e.g. `metadata.name` or `involvedObject.uid`.
    pub field: String,
    /// JSON pointer of the field, e.g. `/metadata/name`.
    pub pointer: String,
    /// What the field reads as when the object does not set it (Go's zero value: `""`, `0`,
    /// `false`).
    pub zero: &'static str,
    /// The value to compare with.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A field label a kind can be selected by: its label, the JSON pointer of the field, and what
/// an unset field reads as.
pub type FieldLabel = (&'static str, &'static str, &'static str);

/// The labels every kind supports.
const METADATA_LABELS: &[FieldLabel] = &[
    ("metadata.name", "/metadata/name", ""),
    ("metadata.namespace", "/metadata/namespace", ""),
];

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// The requirements; all must hold.
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parse selector text on `metadata.name` and `metadata.namespace` only, such as
    /// `metadata.name=web,metadata.namespace!=kube-system`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Self::parse_for(text, &[])
    }

    /// Parse selector text on the metadata labels and `labels` (a kind's field labels).
    pub fn parse_for(text: &str, labels: &[FieldLabel]) -> Result<Self, SelectorError> {
        let err = |problem: String| SelectorError {
            selector: text.to_owned(),
            problem,
        };
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement".into()));
            }
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(err(format!("{part:?} is not of the form field=value")));
            };
            let field = field.trim();
            let Some((label, pointer, zero)) = METADATA_LABELS
                .iter()
                .chain(labels)
                .find(|(label, _, _)| *label == field)
            else {
                return Err(err(format!("field label not supported: {field}")));
            };
            requirements.push(FieldRequirement {
                field: (*label).to_owned(),
                pointer: (*pointer).to_owned(),
                zero,
                value: value.trim().to_owned(),
                negated,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether an object satisfies the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let actual = match object.at(&r.pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => r.zero.to_owned(),
                Some(other) => other.to_string(),
            };
            (actual == r.value) != r.negated
        })
    }

    /// Whether an object with this name and namespace satisfies the selector's metadata
    /// requirements (a selector from [`parse`](Self::parse) has no others).
    pub fn matches_meta(&self, name: Option<&str>, namespace: Option<&str>) -> bool {
        self.requirements.iter().all(|r| {
            let actual = match r.field.as_str() {
                "metadata.name" => name,
                "metadata.namespace" => namespace,
                _ => return true,
            }
            .unwrap_or("");
            (actual == r.value) != r.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    #[test]
    fn labels_should_be_checked_as_kube_apiserver_checks_them() {
        for (key, value) in [("app", "web"), ("example.com/tier", ""), ("a", "a.b-c_d")] {
            assert!(is_label(key, value), "{key}: {value}");
        }
        for (key, value) in [
            ("", "x"),
            (" app", "web"),
            ("app", " web"),
            ("app", "-web"),
            ("a=b", "c"),
            ("app", "b=c"),
            ("Example.com/app", "x"),
            ("app", &"x".repeat(64)),
        ] {
            assert!(!is_label(key, value), "{key}: {value}");
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selector_should_support_every_operator() {
        let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
        let ok = |s: &str| LabelSelector::parse(s).expect(s).matches(&l);
        assert!(ok("app=web"));
        assert!(ok("app==web"));
        assert!(!ok("app!=web"));
        assert!(ok("missing!=x"));
        assert!(ok("tier in (fe, be)"));
        assert!(ok("tier in(fe,be)"));
        assert!(!ok("tier notin (fe,be)"));
        assert!(ok("missing notin (fe)"));
        assert!(ok("app"));
        assert!(!ok("!app"));
        assert!(ok("!missing"));
        assert!(ok("n>4,n<6"));
        assert!(!ok("n>5"));
        assert!(ok("app=web, tier in (fe), !legacy"));
        assert!(ok(""));
        assert!(ok("example.com/part-of!=x"));
    }

    #[test]
    fn label_selector_should_reject_malformed_text() {
        // An empty value is valid: it matches a label set to "".
        assert!(LabelSelector::parse("app=").is_ok());
        for bad in [
            "=web",
            "app in fe",
            "app in (fe",
            "app)",
            "app=web,",
            "app==we b",
            "-bad=x",
            "app foo (x)",
            "n>x",
            "a/b/c=1",
        ] {
            let err = LabelSelector::parse(bad).expect_err(bad);
            assert_eq!(err.selector, bad);
        }
    }

    #[test]
    fn field_selector_should_match_name_and_namespace() {
        let obj = serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}});
        let ok = |s: &str| FieldSelector::parse(s).expect(s).matches_object(&obj);
        assert!(ok("metadata.name=a"));
        assert!(ok("metadata.namespace==ns,metadata.name!=b"));
        assert!(!ok("metadata.name!=a"));
        assert!(FieldSelector::parse("spec.nodeName=x").is_err());
        assert!(FieldSelector::parse("metadata.name").is_err());
    }

    #[test]
    fn dns_names_should_follow_rfc_1123() {
        assert!(is_dns_label("web-1"));
        assert!(!is_dns_label("Web"));
        assert!(!is_dns_label("-web"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("foos.samplecontroller.k8s.io"));
        assert!(!is_dns_subdomain("a..b"));
    }

    proptest::proptest! {
        #[test]
        fn parsing_should_never_panic(text in ".{0,64}") {
            if let Ok(selector) = LabelSelector::parse(&text) {
                selector.matches(&labels(&[("a", "1")]));
            }
            let _ = FieldSelector::parse(&text);
        }

        #[test]
        fn selector_like_text_should_never_panic(text in "[a-z0-9=!(), .-/]{0,40}|[a-z]{1,5} (in|notin) \\([a-z,]{0,10}\\)") {
            let _ = LabelSelector::parse(&text);
            let _ = FieldSelector::parse(&text);
        }

        #[test]
        fn equality_selectors_should_match_exactly_their_labels(
            pairs in proptest::collection::btree_map("[a-z][a-z0-9]{0,8}", "[a-z0-9]{0,8}", 0..5),
        ) {
            let text = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            let selector = LabelSelector::parse(&text).expect("generated selectors are valid");
            proptest::prop_assert!(selector.matches(&pairs));
            let mut other = pairs.clone();
            if let Some((k, v)) = pairs.iter().next() {
                other.insert(k.clone(), format!("{v}x"));
                proptest::prop_assert!(!selector.matches(&other));
            }
        }

        /// An object's labels read in place match as the map `object_labels` builds (labels
        /// that are not strings being no labels).
        #[test]
        fn matching_an_object_should_agree_with_matching_its_labels(
            selector in "[abc]( ?(=|!=|in \\(|notin \\()[0-9x,]{0,3}\\)?)?(,!?[abc]([<>][0-9]|=[0-9x])?){0,2}",
            labels in proptest::collection::btree_map("[abc]", proptest::prop_oneof![
                "[0-9x]{0,2}".prop_map(serde_json::Value::from),
                proptest::num::i64::ANY.prop_map(serde_json::Value::from),
            ], 0..4),
        ) {
            let Ok(selector) = LabelSelector::parse(&selector) else { return Ok(()) };
            let object = serde_json::json!({"metadata": {"labels": labels}});
            proptest::prop_assert_eq!(
                selector.matches_object(&object),
                selector.matches(&object_labels(&object)),
            );
        }
    }
}
