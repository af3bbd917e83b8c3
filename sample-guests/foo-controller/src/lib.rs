//! foo-controller: Kubernetes' sample-controller (seed 002) as a krec guest.
//!
//! A `Foo` (`samplecontroller.k8s.io/v1alpha1`) asks for a Deployment named
//! `spec.deploymentName` with `spec.replicas` replicas. The reconciler creates that Deployment
//! with a controller owner reference to the Foo, scales it when the Foo changes, and copies the
//! Deployment's `status.availableReplicas` into the Foo's status through the status subresource.
//! A Deployment of that name that the Foo does not control is left alone: a warning Event is
//! recorded and the reconcile fails, so the host retries with backoff, as the sample-controller
//! does.

use std::collections::BTreeMap;

use krec_guest::k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use krec_guest::k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use krec_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use krec_guest::prelude::*;
use krec_guest::{CustomResource, Error};
use serde::{Deserialize, Serialize};

/// The desired state of a Foo.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    schema = "disabled",
    crates(
        kube_core = "::krec_guest::kube_core",
        k8s_openapi = "::krec_guest::k8s_openapi",
        serde_json = "::krec_guest::serde_json"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment the Foo owns.
    pub deployment_name: String,
    /// Desired replicas (the CRD validates 1..=10); unset leaves the Deployment's count alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// The observed state of a Foo.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// Available replicas of the owned Deployment.
    #[serde(default)]
    pub available_replicas: i32,
}

/// Event reason when a Foo is synced.
pub const SUCCESS_SYNCED: &str = "Synced";
/// Event reason when the Deployment exists but is not controlled by the Foo.
pub const ERR_RESOURCE_EXISTS: &str = "ErrResourceExists";

#[derive(Default)]
struct FooController;

impl Reconciler for FooController {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        let Some(foo) = ctx.get_opt::<Foo>(req.namespace(), &req.name)? else {
            debug!("Foo {req} is gone; its Deployment is garbage-collected");
            return Ok(Action::done());
        };
        let deployment_name = foo.spec.deployment_name.as_str();
        if deployment_name.is_empty() {
            // Retrying cannot help until the Foo itself changes.
            error!("Foo {req}: spec.deploymentName must be set");
            return Ok(Action::done());
        }

        let deployments = ctx.api::<Deployment>(req.namespace());
        let deployment = match deployments.get_opt(deployment_name)? {
            Some(deployment) => deployment,
            None => {
                info!("Foo {req}: creating Deployment {deployment_name}");
                deployments.create(&new_deployment(&foo)?)?
            }
        };

        if !is_controlled_by(&deployment, &foo) {
            let message =
                format!("Resource {deployment_name:?} already exists and is not managed by Foo");
            record(ctx, &foo, EventType::Warning, ERR_RESOURCE_EXISTS, &message);
            return Err(Error::other(message));
        }

        let current = deployment.spec.as_ref().and_then(|spec| spec.replicas);
        let deployment = match foo.spec.replicas {
            Some(wanted) if current != Some(wanted) => {
                info!("Foo {req}: Deployment {deployment_name} replicas {current:?} -> {wanted}");
                let mut scaled = deployment;
                scaled.spec.get_or_insert_default().replicas = Some(wanted);
                deployments.update(&scaled)?
            }
            _ => deployment,
        };

        let available = deployment
            .status
            .as_ref()
            .and_then(|status| status.available_replicas)
            .unwrap_or(0);
        if foo.status.as_ref().map(|s| s.available_replicas) != Some(available) {
            let mut foo = foo.clone();
            foo.status = Some(FooStatus {
                available_replicas: available,
            });
            ctx.update_status(&foo)?;
        }

        ctx.record_event(
            &foo,
            EventType::Normal,
            SUCCESS_SYNCED,
            "Foo synced successfully",
        )?;
        Ok(Action::done())
    }
}

/// Record an Event; a failure to record is logged, never a reason to fail the reconcile.
fn record(ctx: &Context, foo: &Foo, event_type: EventType, reason: &str, message: &str) {
    if let Err(err) = ctx.record_event(foo, event_type, reason, message) {
        warn!(
            "cannot record {reason} event for Foo {}: {err}",
            foo.name_any()
        );
    }
}

/// The Deployment a Foo asks for: nginx pods labelled with the Foo's name.
fn new_deployment(foo: &Foo) -> Result<Deployment> {
    let labels = BTreeMap::from([
        ("app".to_owned(), "nginx".to_owned()),
        ("controller".to_owned(), foo.name_any()),
    ]);
    let mut deployment = Deployment {
        metadata: ObjectMeta {
            name: Some(foo.spec.deployment_name.clone()),
            namespace: foo.metadata.namespace.clone(),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: foo.spec.replicas,
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "nginx".into(),
                        image: Some("nginx:latest".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    // The Foo controls it: deleting the Foo deletes it, and its events reconcile the Foo.
    set_controller_reference(foo, &mut deployment)?;
    Ok(deployment)
}

export!(FooController);
