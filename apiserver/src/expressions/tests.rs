use serde_json::json;

use super::*;

/// A Foo schema with five rules: one across fields with a `fieldPath`, a transition rule, one
/// with a `messageExpression`, one with a `reason` over a list, and one on the resource itself.
fn schema() -> Value {
    json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('app-')", "message": "names start with app-"}],
        "properties": {
        "metadata": {"type": "object"},
        "spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.replicas",
                 "message": "replicas must be at least minReplicas", "fieldPath": ".replicas"}],
            "properties": {
                "replicas": {"type": "integer"},
                "minReplicas": {"type": "integer"},
                "mode": {"type": "string",
                    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]},
                "name": {"type": "string", "maxLength": 63,
                    "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')",
                        "messageExpression": "'name ' + self + ' must be lowercase letters'"}]},
                "tags": {"type": "array", "maxItems": 10,
                    "items": {"type": "string", "maxLength": 20},
                    "x-kubernetes-validations": [{"rule": "self.all(t, t != 'forbidden')",
                        "reason": "FieldValueForbidden", "message": "no tag may be 'forbidden'"}]}}}}})
}

fn foo(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Foo",
        "metadata": {"name": "app-one", "namespace": "default", "labels": {"a": "b"}}, "spec": spec})
}

fn good() -> Value {
    json!({"replicas": 3, "minReplicas": 1, "mode": "fast", "name": "web", "tags": ["a", "b"]})
}

#[test]
fn objects_breaking_each_rule_should_be_refused_with_kubes_message() {
    let rules = Rules::compile(&schema()).expect("rules");
    assert_eq!(rules.validate(&foo(good()), None), Vec::<Cause>::new());
    let cases: Vec<(Value, Option<Value>, Cause)> = vec![
        (
            json!({"replicas": 1, "minReplicas": 2}),
            None,
            (
                "spec.replicas".into(),
                "Invalid value: replicas must be at least minReplicas".into(),
            ),
        ),
        (
            json!({"replicas": 1, "minReplicas": 1, "name": "Web"}),
            None,
            (
                "spec.name".into(),
                "Invalid value: \"Web\": name Web must be lowercase letters".into(),
            ),
        ),
        (
            json!({"replicas": 1, "minReplicas": 1, "tags": ["a", "forbidden"]}),
            None,
            (
                "spec.tags".into(),
                "Forbidden: no tag may be 'forbidden'".into(),
            ),
        ),
        (
            json!({"replicas": 1, "minReplicas": 1, "mode": "slow"}),
            Some(json!({"replicas": 1, "minReplicas": 1, "mode": "fast"})),
            (
                "spec.mode".into(),
                "Invalid value: \"slow\": mode is immutable".into(),
            ),
        ),
    ];
    for (spec, old, cause) in cases {
        let old = old.map(foo);
        assert_eq!(
            rules.validate(&foo(spec.clone()), old.as_ref()),
            vec![cause],
            "{spec}"
        );
    }
    // The transition rule holds on create (nothing to compare with) and when unchanged.
    let changed_mode = json!({"replicas": 1, "minReplicas": 1, "mode": "slow"});
    assert!(rules.validate(&foo(changed_mode.clone()), None).is_empty());
    assert!(
        rules
            .validate(&foo(changed_mode.clone()), Some(&foo(changed_mode)))
            .is_empty()
    );
    // The resource's own rule sees its name, at kube's `<nil>` path.
    let mut renamed = foo(good());
    renamed["metadata"]["name"] = json!("one");
    assert_eq!(
        rules.validate(&renamed, None),
        vec![(
            "<nil>".to_owned(),
            "Invalid value: names start with app-".to_owned()
        )]
    );
}

#[test]
fn a_rule_that_cannot_be_evaluated_should_say_why() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"a": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.a > 0"}]}}});
    let rules = Rules::compile(&schema).expect("rules");
    assert_eq!(
        rules.validate(&json!({"spec": {}}), None),
        vec![(
            "spec".to_owned(),
            "Invalid value: \"object\": no such key: a evaluating rule: self.a > 0".to_owned()
        )]
    );
    assert_eq!(
        rules.validate(&json!({"spec": {"a": 0}}), None),
        vec![(
            "spec".to_owned(),
            "Invalid value: failed rule: self.a > 0".to_owned()
        )]
    );
}

#[test]
fn rules_should_be_compiled_once_per_schema() {
    let schema = Arc::new(schema());
    let before = compilations();
    let first = rules_for(&schema).expect("rules");
    for _ in 0..10 {
        let again = rules_for(&schema).expect("rules");
        assert!(Arc::ptr_eq(&first, &again));
    }
    assert_eq!(compilations() - before, 1);
}

#[test]
fn the_kubernetes_library_should_answer_as_kubes() {
    let root = library::context();
    let eval = |source: &str| {
        let expr = parse(source).expect("parses");
        run(&expr, &root.new_inner_scope())
    };
    for (source, expected) in [
        ("'ABC'.lowerAscii() == 'abc'", true),
        ("' a '.trim() == 'a'", true),
        ("'a,b,c'.split(',') == ['a', 'b', 'c']", true),
        ("'hello'.substring(1, 3) == 'el'", true),
        ("'héllo'.size() == 5", true),
        ("'abc 123'.find('[0-9]+') == '123'", true),
        ("'a1b22'.findAll('[0-9]+') == ['1', '22']", true),
        ("[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6", true),
        ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", true),
        (
            "[1, 2, 3].indexOf(2) == 1 && 'abcb'.lastIndexOf('b') == 3",
            true,
        ),
        ("['a', 'b'].join('-') == 'a-b'", true),
        ("'x'.replace('x', 'y') == 'y'", true),
        (
            "'abcabc'.indexOf('a', 1) == 3 && 'abcabc'.lastIndexOf('a', 2) == 0",
            true,
        ),
        ("'abc'.split('') == ['a', 'b', 'c']", true),
    ] {
        assert_eq!(eval(source), Ok(cel::Value::Bool(expected)), "{source}");
    }
    assert_eq!(eval("[].min()"), Err("min called on empty list".to_owned()));
}

#[test]
fn a_crd_should_be_refused_rules_that_do_not_compile_or_cost_too_much() {
    let path = "spec.validation.openAPIV3Schema";
    assert_eq!(check(&schema(), path), Vec::<Cause>::new());
    let bad = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.a >"},
            {"rule": "frobnicate(self)"},
            {"rule": "self.a == 1", "optionalOldSelf": true}]}}});
    let causes = check(&bad, path);
    let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule",
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule",
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].optionalOldSelf",
        ]
    );
    assert!(
        causes[0].1.starts_with("Invalid value: apiextensions.ValidationRule{Rule:\"self.a >\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:"),
        "{}",
        causes[0].1
    );
    assert!(
        causes[1].1.ends_with("compilation failed: ERROR: <input>: undeclared reference to 'frobnicate' (in container '')"),
        "{}",
        causes[1].1
    );
    // Every string of every item of unbounded lists, matched against a regex: far over budget.
    let expensive = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "object",
            "properties": {"names": {"type": "array", "items": {"type": "string"}}},
            "x-kubernetes-validations": [{"rule": "self.names.all(n, n.matches('^[a-z]+$'))"}]}}}}}});
    assert_eq!(
        check(&expensive, path),
        vec![
            (
                "spec.validation.openAPIV3Schema.properties[spec].properties[items].items.x-kubernetes-validations[0].rule".to_owned(),
                "Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)".to_owned()
            ),
            (
                path.to_owned(),
                "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)".to_owned()
            ),
        ]
    );
    // Bounded, it fits.
    let bounded = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"items": {"type": "array", "maxItems": 10, "items": {"type": "object",
            "properties": {"names": {"type": "array", "maxItems": 10,
                "items": {"type": "string", "maxLength": 64}}},
            "x-kubernetes-validations": [{"rule": "self.names.all(n, n.matches('^[a-z]+$'))"}]}}}}}});
    assert_eq!(check(&bounded, path), Vec::<Cause>::new());
    // oldSelf where nothing correlates: inside a set's items.
    let uncorrelatable = json!({"type": "object", "properties": {"l": {"type": "array",
        "x-kubernetes-list-type": "set", "maxItems": 5,
        "items": {"type": "string", "maxLength": 5,
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}});
    assert_eq!(
        check(&uncorrelatable, path),
        vec![(
            "spec.validation.openAPIV3Schema.properties[l].items.x-kubernetes-validations[0].rule".to_owned(),
            "Forbidden: oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[l].items".to_owned()
        )]
    );
}

#[test]
fn computed_values_should_cost_what_they_are_computed_of() {
    // Each of 20 000 items against every other, through a `map`: kube refuses it.
    let schema = json!({"type": "object", "properties": {"items": {"type": "array",
        "maxItems": 20000, "items": {"type": "string", "maxLength": 10}},
        "s": {"type": "string"}},
        "x-kubernetes-validations": [
            {"rule": "self.items.map(x, x).all(a, self.items.exists_one(b, b == a))"},
            {"rule": "self.s.replace('', self.s).replace('', self.s) != ''"}]});
    let causes = check(&schema, "p");
    let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "p.x-kubernetes-validations[0].rule",
            "p.x-kubernetes-validations[1].rule",
            "p"
        ],
        "{causes:?}"
    );
}

#[test]
fn an_expression_too_deep_should_be_refused_not_crash() {
    let chain = vec!["1"; 20_000].join(" + ");
    let error = parse(&format!("self.a == {chain}")).expect_err("refused");
    assert!(error.contains("nested deeper than 128"), "{error}");
    let long = "a".repeat(100_001);
    assert!(
        parse(&long)
            .expect_err("refused")
            .contains("size exceeds limit")
    );
}

/// A rule quadratic in its object (every value unique, by filtering the map once per key).
fn unique_values() -> Value {
    json!({"type": "object", "properties": {"data": {"type": "object",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [
            {"rule": "self.all(k, self.filter(k2, self[k2] == self[k]).size() == 1)",
             "message": "values must be unique"}]}}})
}

fn keys(n: usize) -> Value {
    let data: serde_json::Map<String, Value> = (0..n)
        .map(|i| (format!("key-{i}"), json!(format!("value-{i}"))))
        .collect();
    json!({"data": data})
}

#[test]
fn a_rule_over_its_runtime_cost_limit_should_be_stopped_with_kubes_message() {
    let rules = Rules::compile(&unique_values()).expect("rules");
    // 100 keys: 10 000 inner steps, well within the limit.
    assert_eq!(rules.validate(&keys(100), None), Vec::<Cause>::new());
    // 1 000 keys: a million inner steps and more: stopped, never run to its end.
    let started = std::time::Instant::now();
    let causes = rules.validate(&keys(1000), None);
    let took = started.elapsed();
    assert_eq!(
        causes,
        [(
            "data".to_owned(),
            "Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: values must be unique".to_owned()
        )]
    );
    eprintln!("stopped after {took:?}");
}

#[test]
fn rules_should_share_one_budget_per_object() {
    // Each rule costs under the per-call limit; together past the budget, the last ones are
    // refused with kube's message and no further rule runs.
    let rule = json!({"rule": "self.all(k, self.filter(k2, self[k2] == self[k]).size() == 1)"});
    let schema = json!({"type": "object", "properties": {"data": {"type": "object",
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": vec![rule; 40]}}});
    let rules = Rules::compile(&schema).expect("rules");
    let causes = rules.validate(&keys(200), None);
    assert_eq!(
        causes,
        [(
            "data".to_owned(),
            format!("Invalid value: \"object\": {}", cost::BUDGET_EXHAUSTED)
        )]
    );
}
