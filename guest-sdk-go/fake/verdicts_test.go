package fake_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"krec.dev/guest/fake"
)

// witCase names an API error as the WIT error variant does, as the host names it to a guest.
func witCase(err error) string {
	switch apierrors.ReasonForError(err) {
	case metav1.StatusReasonNotFound:
		return "not-found"
	case metav1.StatusReasonAlreadyExists:
		return "already-exists"
	case metav1.StatusReasonConflict:
		return "conflict"
	case metav1.StatusReasonForbidden:
		return "forbidden"
	case metav1.StatusReasonInvalid, metav1.StatusReasonBadRequest:
		return "invalid"
	case metav1.StatusReasonTimeout:
		return "timeout"
	case metav1.StatusReasonServiceUnavailable:
		return "unavailable"
	}
	return "other"
}

// The fake cluster judges as the cluster does: the invalid objects of tests/verdicts/cases.json,
// written through the guest's client, get the verdicts the host gives under krec dev
// (tests/verdicts/expected.json, which krec's own test holds the host and the Rust fake to).
func TestEveryCaseShouldGetTheHostsVerdict(t *testing.T) {
	repo := filepath.Join("..", "..")
	var cases struct {
		CRDs  []string `json:"crds"`
		Cases []struct {
			Name   string           `json:"name"`
			Call   string           `json:"call"`
			Before []map[string]any `json:"before"`
			Object map[string]any   `json:"object"`
		} `json:"cases"`
	}
	var expected struct {
		Verdicts []struct {
			Name    string `json:"name"`
			Verdict string `json:"verdict"`
		} `json:"verdicts"`
	}
	for path, into := range map[string]any{"cases.json": &cases, "expected.json": &expected} {
		text, err := os.ReadFile(filepath.Join(repo, "tests", "verdicts", path))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(text, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	cluster := fake.NewCluster(t)
	for _, crd := range cases.CRDs {
		cluster.AddFiles(t, filepath.Join(repo, crd))
	}
	c := cluster.Client()
	ctx := context.Background()
	if len(cases.Cases) < 20 || len(cases.Cases) != len(expected.Verdicts) {
		t.Fatalf("%d cases, %d verdicts", len(cases.Cases), len(expected.Verdicts))
	}
	for i, tc := range cases.Cases {
		for _, before := range tc.Before {
			if err := c.Create(ctx, &unstructured.Unstructured{Object: before}); err != nil {
				t.Fatalf("%s: creating what comes before: %v", tc.Name, err)
			}
		}
		object := &unstructured.Unstructured{Object: tc.Object}
		var err error
		if tc.Call == "update" {
			err = c.Update(ctx, object)
		} else {
			err = c.Create(ctx, object)
		}
		got := "ok"
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			got = witCase(err) + ": " + status.Status().Message
		} else if err != nil {
			got = "not an API error: " + err.Error()
		}
		if want := expected.Verdicts[i]; got != want.Verdict || tc.Name != want.Name {
			t.Errorf("%s:\n got  %s\n want %s", tc.Name, got, want.Verdict)
		}
	}
}
