use super::*;

fn roundtrip(object: &Value) -> Value {
    let body = encode(object).expect("a built-in kind").expect("encodes");
    decode(&body).expect("decodes")
}

/// The message of `object` with `extra` fields set the way Go writes unset value fields.
fn body_with(object: &Value, extra: impl FnOnce(&mut DynamicMessage)) -> Vec<u8> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let descriptor = message_for(api_version, kind).expect("message");
    let mut message = message_from_json(object, &descriptor).expect("message");
    extra(&mut message);
    let mut wrapped = object.clone();
    wrapped["apiVersion"] = json!(api_version);
    let mut body = encode(&json!({"apiVersion": api_version, "kind": kind}))
        .expect("kind")
        .expect("envelope");
    // Replace the envelope's raw message with ours.
    let unknown = pool()
        .get_message_by_name("apimachinery.pkg.runtime.Unknown")
        .expect("Unknown");
    let mut envelope = DynamicMessage::decode(unknown, &body[4..]).expect("envelope");
    envelope.set_field_by_name("raw", Proto::Bytes(message.encode_to_vec().into()));
    body.truncate(4);
    envelope.encode(&mut body).expect("encode");
    body
}

#[test]
fn the_descriptors_should_cover_every_built_in_kind_served() {
    for kind in crate::resources::builtins()
        .into_iter()
        .filter(|rt| !rt.create_only)
    {
        let found = message_for(&kind.api_version(), &kind.kind);
        assert!(found.is_some(), "{}/{}", kind.api_version(), kind.kind);
        let list = message_for(&kind.api_version(), &format!("{}List", kind.kind));
        assert!(list.is_some(), "{}List", kind.kind);
    }
    assert!(message_for("v1", "DeleteOptions").is_some());
    assert!(message_for("meta.k8s.io/v1", "Status").is_some());
    assert!(message_for("example.com/v1", "Foo").is_none());
}

#[test]
fn a_namespace_should_decode_as_kubectl_sends_it() {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}});
    let body = body_with(&ns, |message| {
        // Go writes every value field, set or not.
        let Some(Proto::Message(meta)) = message.get_field_by_name_mut("metadata") else {
            panic!("metadata")
        };
        meta.set_field_by_name("generateName", Proto::String(String::new()));
        meta.set_field_by_name("namespace", Proto::String(String::new()));
        meta.set_field_by_name("generation", Proto::I64(0));
        let time = pool()
            .get_message_by_name("apimachinery.pkg.apis.meta.v1.Time")
            .expect("Time");
        meta.set_field_by_name(
            "creationTimestamp",
            Proto::Message(DynamicMessage::new(time)),
        );
        let spec = message
            .descriptor()
            .get_field_by_name("spec")
            .expect("spec");
        let Kind::Message(spec_type) = spec.kind() else {
            panic!("spec")
        };
        message.set_field(&spec, Proto::Message(DynamicMessage::new(spec_type)));
    });
    assert_eq!(
        decode(&body).expect("decodes"),
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "demo"}, "spec": {}})
    );
}

#[test]
fn special_types_should_have_their_json_forms() {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default",
            "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10}}],
                    "volumes": [{"name": "v", "configMap": {"name": "cm", "defaultMode": 420}}]}}}});
    assert_eq!(roundtrip(&deployment), deployment);
}

#[test]
fn an_int_or_string_should_follow_its_type_whatever_else_go_wrote() {
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": "http"}]}});
    let body = body_with(&service, |message| {
        let Some(Proto::Message(spec)) = message.get_field_by_name_mut("spec") else {
            panic!("spec")
        };
        let Some(Proto::List(ports)) = spec.get_field_by_name_mut("ports") else {
            panic!("ports")
        };
        let Proto::Message(port) = &mut ports[0] else {
            panic!("port")
        };
        let Some(Proto::Message(target)) = port.get_field_by_name_mut("targetPort") else {
            panic!("targetPort")
        };
        // Go writes all three fields of an IntOrString.
        target.set_field_by_name("intVal", Proto::I32(0));
    });
    assert_eq!(decode(&body).expect("decodes"), service);
}

#[test]
fn secrets_leases_and_crds_should_round_trip() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"k": "dmFsdWU=", "empty": ""}, "type": "Opaque"});
    assert_eq!(roundtrip(&secret), secret);
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "l", "namespace": "default"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
            "renewTime": "2026-01-02T03:04:05.123456Z"}});
    assert_eq!(roundtrip(&lease), lease);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Foo", "plural": "foos", "shortNames": ["fo"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"spec": {"type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 1.0, "default": 3},
                            "tags": {"type": "array", "items": {"type": "string"},
                                "x-kubernetes-list-type": "set"}},
                        "additionalProperties": false}}}}}]}});
    assert_eq!(roundtrip(&crd), crd);
}

#[test]
fn delete_options_should_decode() {
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
        "gracePeriodSeconds": 0, "propagationPolicy": "Foreground"});
    assert_eq!(roundtrip(&options), options);
}

#[test]
fn omitempty_value_fields_should_be_sorted_for_lookup_and_pointers_keep_zeros() {
    assert!(OMIT_ZERO.windows(2).all(|w| w[0] < w[1]));
    // `stdin: false` (a value field) goes, `replicas: 0` and `automountServiceAccountToken:
    // false` (pointers) stay.
    let pod = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 0, "template": {"spec": {"automountServiceAccountToken": false,
            "hostNetwork": false, "containers": [{"name": "c", "stdin": false, "tty": true}]}}}});
    assert_eq!(
        roundtrip(&pod),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 0, "template": {"spec": {"automountServiceAccountToken": false,
                "containers": [{"name": "c", "tty": true}]}}}})
    );
}

#[test]
fn go_durations_should_format_and_parse() {
    for (nanos, text) in [
        (0, "0s"),
        (1_500_000_000, "1.5s"),
        (3_600_000_000_000, "1h0m0s"),
        (90_000_000_000, "1m30s"),
        (300_000_000, "300ms"),
    ] {
        assert_eq!(format_duration(nanos), text);
        assert_eq!(krec_core::duration::parse_nanos(text), Ok(nanos));
    }
    assert!(krec_core::duration::parse_nanos("").is_err());
    assert!(krec_core::duration::parse_nanos("5x").is_err());
    assert!(krec_core::duration::parse_nanos("99999999999999h").is_err());
}

#[test]
fn bad_bodies_should_be_4xx_errors() {
    assert_eq!(decode(b"{}").expect_err("no prefix").code, 400);
    assert_eq!(decode(b"k8s\0\xff\xff").expect_err("garbage").code, 400);
    let foo = body_with(&json!({"apiVersion": "v1", "kind": "ConfigMap"}), |_| {});
    let mut foo_kind = foo.clone();
    // Same envelope, a kind with no message.
    let unknown = pool()
        .get_message_by_name("apimachinery.pkg.runtime.Unknown")
        .expect("Unknown");
    let mut envelope = DynamicMessage::decode(unknown, &foo[4..]).expect("envelope");
    let Some(Proto::Message(type_meta)) = envelope.get_field_by_name_mut("typeMeta") else {
        panic!("typeMeta")
    };
    type_meta.set_field_by_name("apiVersion", Proto::String("example.com/v1".into()));
    type_meta.set_field_by_name("kind", Proto::String("Foo".into()));
    foo_kind.truncate(4);
    envelope.encode(&mut foo_kind).expect("encode");
    assert_eq!(decode(&foo_kind).expect_err("no message").code, 415);
}

proptest::proptest! {
    #[test]
    fn arbitrary_bodies_should_never_panic(
        raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        kind in proptest::sample::select(&["Pod", "Deployment", "Secret", "Namespace", "Nope"]),
    ) {
        let api_version = if kind == "Deployment" { "apps/v1" } else { "v1" };
        let base = body_with(&json!({"apiVersion": "v1", "kind": "ConfigMap"}), |_| {});
        let unknown = pool().get_message_by_name("apimachinery.pkg.runtime.Unknown").expect("Unknown");
        let mut envelope = DynamicMessage::decode(unknown, &base[4..]).expect("envelope");
        if let Some(Proto::Message(type_meta)) = envelope.get_field_by_name_mut("typeMeta") {
            type_meta.set_field_by_name("apiVersion", Proto::String(api_version.into()));
            type_meta.set_field_by_name("kind", Proto::String(kind.into()));
        }
        envelope.set_field_by_name("raw", Proto::Bytes(raw.clone().into()));
        let mut wrapped = MAGIC.to_vec();
        envelope.encode(&mut wrapped).expect("envelope");
        for body in [&raw, &wrapped] {
            if let Err(err) = decode(body) {
                proptest::prop_assert!((400..500).contains(&err.code), "{err}");
            }
        }
    }
}

#[test]
fn a_body_of_packed_numbers_should_be_refused_before_it_is_decoded() {
    let pod = |groups: usize| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                "securityContext": {"supplementalGroups": vec![1; groups]}}})
    };
    // Two bytes a number (a packed list spends one): 300 000 of them in 600 KB, which would
    // decode to ~45 MB.
    let body = encode(&pod(300_000)).expect("a Pod").expect("encodes");
    assert!(body.len() < 1 << 20, "{} bytes", body.len());
    let err = decode(&body).expect_err("too many values");
    assert_eq!(err.code, 413, "{}", err.message);
    assert!(
        err.message.contains("more than 250000 values"),
        "{}",
        err.message
    );
    // An ordinary list decodes.
    let decoded = decode(&encode(&pod(1000)).expect("a Pod").expect("encodes")).expect("decodes");
    assert_eq!(
        decoded["spec"]["securityContext"]["supplementalGroups"]
            .as_array()
            .map(Vec::len),
        Some(1000)
    );
}
