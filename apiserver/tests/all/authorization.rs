//! What RBAC allows, asked the ways users ask: `kubectl auth can-i` (one question, and
//! `--list`), and the writes RBAC itself guards — nobody grants what they do not hold.

use krec_apiserver::Server;

use crate::support::kubectl::{self, Kubectl};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `kubectl auth can-i`, for oneself and `--as` another: yes and no as the bindings say, and
/// `--list` listing the rules the bindings give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_should_answer_as_the_bindings_say() {
    let (cluster, _dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    kubectl.ok(&["create", "namespace", "demo"]);
    assert_eq!(
        kubectl.ok(&["auth", "can-i", "delete", "nodes"]).trim(),
        "yes"
    );
    let reader = "--as=system:serviceaccount:demo:reader";
    let out = kubectl.run(&[reader, "auth", "can-i", "list", "pods", "-n", "demo"]);
    assert_eq!(text(&out.stdout).trim(), "no");
    assert_eq!(out.status.code(), Some(1));
    kubectl.ok(&[
        "create",
        "rolebinding",
        "reader",
        "-n",
        "demo",
        "--clusterrole=view",
        "--serviceaccount=demo:reader",
    ]);
    let can = |args: &[&str]| {
        text(
            &kubectl
                .run(&[&[reader, "auth", "can-i"], args].concat())
                .stdout,
        )
    };
    assert_eq!(can(&["list", "pods", "-n", "demo"]).trim(), "yes");
    assert_eq!(
        can(&["watch", "deployments.apps", "-n", "demo"]).trim(),
        "yes"
    );
    assert_eq!(can(&["delete", "pods", "-n", "demo"]).trim(), "no");
    assert_eq!(can(&["list", "pods", "-n", "default"]).trim(), "no");
    assert_eq!(
        can(&["get", "secrets", "-n", "demo"]).trim(),
        "no",
        "view reads no Secrets"
    );
    assert_eq!(can(&["get", "/healthz"]).trim(), "yes");
    assert_eq!(can(&["get", "/metrics"]).trim(), "no");

    let list = kubectl.ok(&[reader, "auth", "can-i", "--list", "-n", "demo"]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(
        lines[0].starts_with("Resources") && lines[0].contains("Non-Resource URLs"),
        "{list}"
    );
    let row = |resource: &str| {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(resource))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        row("pods").as_deref(),
        Some("pods [] [] [get list watch]"),
        "{list}"
    );
    assert_eq!(
        row("selfsubjectaccessreviews.authorization.k8s.io").as_deref(),
        Some("selfsubjectaccessreviews.authorization.k8s.io [] [] [create]"),
        "{list}"
    );
    assert!(row("secrets").is_none(), "{list}");
    assert!(list.contains("[/healthz]"), "{list}");
    // In a namespace without bindings, only what every user has.
    let elsewhere = kubectl.ok(&[reader, "auth", "can-i", "--list", "-n", "default"]);
    assert!(!elsewhere.contains("pods"), "{elsewhere}");

    // A path the user may not get is refused with kube's text.
    let out = kubectl.run(&[reader, "get", "--raw", "/metrics"]);
    assert_eq!(
        text(&out.stderr).trim(),
        r#"Error from server (Forbidden): forbidden: User "system:serviceaccount:demo:reader" cannot get path "/metrics""#
    );
    cluster.shutdown().await;
}

/// Whoever may write RBAC objects still grants only what it holds: binding `cluster-admin` or
/// writing a role with more than one's own rules is refused with kube's message, unless the
/// user has `bind` or `escalate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_writes_should_grant_nothing_the_writer_does_not_hold() {
    let (cluster, dir, kubectl): (Server, _, Kubectl) = kubectl::start().await;
    kubectl.ok(&["create", "namespace", "team"]);
    // `lead` may manage RBAC in `team` and read pods there, nothing more.
    let policy = dir.path().join("lead.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-manager, namespace: team}
rules:
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, get, list, update, patch, delete]
- apiGroups: [\"\"]
  resources: [pods]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lead, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-manager}
subjects:
- {kind: User, apiGroup: rbac.authorization.k8s.io, name: lead}
",
    )
    .expect("write");
    kubectl.ok(&["apply", "-f", &policy.display().to_string()]);
    let lead = |args: &[&str]| kubectl.run(&[&["--as=lead", "-n", "team"], args].concat());

    let out = lead(&[
        "create",
        "rolebinding",
        "takeover",
        "--clusterrole=cluster-admin",
        "--user=lead",
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io \"takeover\" is forbidden: user \"lead\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"
        ),
        "{stderr}"
    );
    let out = lead(&[
        "create",
        "role",
        "more",
        "--verb=get,list,delete",
        "--resource=pods,secrets",
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "roles.rbac.authorization.k8s.io \"more\" is forbidden: user \"lead\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"delete\"]}"
        ),
        "{stderr}"
    );
    // What it holds it may grant.
    let out = lead(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lead(&[
        "create",
        "rolebinding",
        "dev",
        "--role=pod-reader",
        "--user=dev",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `bind` on a role lets it bind that role without holding it.
    kubectl.ok(&[
        "create",
        "role",
        "binder",
        "-n",
        "team",
        "--verb=bind",
        "--resource=clusterroles.rbac.authorization.k8s.io",
        "--resource-name=edit",
    ]);
    kubectl.ok(&[
        "create",
        "rolebinding",
        "binder",
        "-n",
        "team",
        "--role=binder",
        "--user=lead",
    ]);
    let out = lead(&[
        "create",
        "rolebinding",
        "editors",
        "--clusterrole=edit",
        "--user=dev",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lead(&[
        "create",
        "rolebinding",
        "admins",
        "--clusterrole=admin",
        "--user=dev",
    ]);
    assert!(
        text(&out.stderr).contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        text(&out.stderr)
    );
    cluster.shutdown().await;
}
