import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";

import { AdmissionRequest, type KObject } from "@krec/guest";
import { FakeCluster } from "@krec/guest/testing";

import { dnsSubdomainProblem, FooValidator, quote } from "../src/app.js";

function foo(name: string, deploymentName: string): KObject {
  return {
    apiVersion: "samplecontroller.k8s.io/v1alpha1",
    kind: "Foo",
    metadata: { name, namespace: "default" },
    spec: { deploymentName, replicas: 1 },
  };
}

test("a Foo naming an invalid Deployment should be refused as invalid", () => {
  const verdict = new FakeCluster().validate(new FooValidator(), AdmissionRequest.create(foo("example", "Not_A_Name")));
  assert.equal(verdict.allowed, false);
  assert.equal(verdict.code, 422);
  assert.equal(verdict.reason, "Invalid");
  assert.match(verdict.message ?? "", /^spec\.deploymentName: Invalid value: "Not_A_Name": a lowercase RFC 1123/);
});

/** The Foo CustomResourceDefinition (foo-controller's), which a stored Foo needs. */
const FOO_CRD = join(process.cwd(), "..", "foo-controller", "crd", "foo-crd.yaml");

test("a Deployment another Foo uses should be refused, and its own kept", () => {
  const taken = foo("first", "web");
  const cluster = new FakeCluster().addFiles(FOO_CRD).add(taken);
  const verdict = cluster.validate(new FooValidator(), AdmissionRequest.create(foo("second", "web")));
  assert.equal(verdict.allowed, false);
  assert.equal(
    verdict.message,
    'spec.deploymentName: Duplicate value: "web": already used by Foo "first" in namespace "default"',
  );
  const changed = { ...taken, metadata: { ...taken.metadata, labels: { k: "v" } } };
  assert.ok(cluster.validate(new FooValidator(), AdmissionRequest.update(taken, changed)).allowed);
  assert.ok(cluster.validate(new FooValidator(), AdmissionRequest.create(foo("third", "api"))).allowed);
});

test("a delete should be allowed without reading anything", () => {
  const cluster = new FakeCluster();
  assert.ok(cluster.validate(new FooValidator(), AdmissionRequest.delete(foo("gone", "Bad_Name"))).allowed);
});

test("deployment names should be DNS subdomains", () => {
  assert.equal(dnsSubdomainProblem("web"), undefined);
  assert.equal(dnsSubdomainProblem("web-1.example"), undefined);
  assert.ok(dnsSubdomainProblem("Web"));
  assert.ok(dnsSubdomainProblem("-web"));
  assert.equal(dnsSubdomainProblem(""), "must not be empty");
  assert.equal(dnsSubdomainProblem("a".repeat(254)), "must be no more than 253 characters");
});

test("names should be quoted as the Rust sample quotes them", () => {
  assert.equal(quote('a"b\\c'), '"a\\"b\\\\c"');
  assert.equal(quote("tab\there"), '"tab\\there"');
  assert.equal(quote("\u0001"), '"\\u{1}"');
});
