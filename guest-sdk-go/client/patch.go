package client

import (
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/types"
)

type mergeFrom struct {
	from Object
	opts MergeFromOptions
}

// MergeFromOptions modify MergeFrom.
type MergeFromOptions struct {
	// OptimisticLock puts the original's resourceVersion in the patch: the patch fails with a
	// conflict if the object changed since.
	OptimisticLock bool
}

// MergeFromOption modifies MergeFrom.
type MergeFromOption interface{ ApplyToMergeFrom(*MergeFromOptions) }

// MergeFromWithOptimisticLock is MergeFrom's optimistic lock.
type MergeFromWithOptimisticLock struct{}

// ApplyToMergeFrom sets the lock.
func (MergeFromWithOptimisticLock) ApplyToMergeFrom(o *MergeFromOptions) { o.OptimisticLock = true }

// MergeFrom is a JSON merge patch from obj (a copy taken before the changes) to the object
// patched: `patch := client.MergeFrom(rs.DeepCopy()); …change rs…; c.Patch(ctx, rs, patch)`.
func MergeFrom(obj Object, opts ...MergeFromOption) Patch {
	m := &mergeFrom{from: obj}
	for _, o := range opts {
		o.ApplyToMergeFrom(&m.opts)
	}
	return m
}

func (m *mergeFrom) Type() types.PatchType { return types.MergePatchType }

func (m *mergeFrom) Data(obj Object) ([]byte, error) {
	original, err := json.Marshal(m.from)
	if err != nil {
		return nil, err
	}
	modified, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	data, err := jsonpatch.CreateMergePatch(original, modified)
	if err != nil {
		return nil, fmt.Errorf("computing the merge patch: %w", err)
	}
	if m.opts.OptimisticLock {
		var patch map[string]any
		if err := json.Unmarshal(data, &patch); err != nil {
			return nil, err
		}
		metadata, _ := patch["metadata"].(map[string]any)
		if metadata == nil {
			metadata = map[string]any{}
		}
		metadata["resourceVersion"] = m.from.GetResourceVersion()
		patch["metadata"] = metadata
		return json.Marshal(patch)
	}
	return data, nil
}

type rawPatch struct {
	patchType types.PatchType
	data      []byte
}

// RawPatch is a patch of the given type and body.
func RawPatch(patchType types.PatchType, data []byte) Patch { return &rawPatch{patchType, data} }

func (r *rawPatch) Type() types.PatchType           { return r.patchType }
func (r *rawPatch) Data(obj Object) ([]byte, error) { return r.data, nil }

// Apply is server-side apply: the object patched is the applied configuration (set only the
// fields the guest owns), written as the guest's field manager.
var Apply Patch = applyPatch{}

type applyPatch struct{}

func (applyPatch) Type() types.PatchType { return types.ApplyPatchType }

func (applyPatch) Data(obj Object) ([]byte, error) { return json.Marshal(obj) }

// Merge is a JSON merge patch of the whole object.
var Merge Patch = mergePatch{}

type mergePatch struct{}

func (mergePatch) Type() types.PatchType           { return types.MergePatchType }
func (mergePatch) Data(obj Object) ([]byte, error) { return json.Marshal(obj) }
