package wit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The bindings here were generated from ../../../wit (make go-bindings); this fails when the
// WIT changed since, so they never go stale unnoticed.
func TestBindingsShouldBeGeneratedFromTheCurrentWIT(t *testing.T) {
	files, err := filepath.Glob("../../../wit/*.wit")
	if err != nil || len(files) == 0 {
		t.Fatalf("no WIT files found: %v", err)
	}
	sort.Strings(files)
	hash := sha256.New()
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		hash.Write(text)
	}
	recorded, err := os.ReadFile("wit.sha256")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(hash.Sum(nil)), strings.TrimSpace(string(recorded)); got != want {
		t.Fatalf("wit/ changed since the Go bindings were generated (%s, recorded %s): run `make go-bindings`", got, want)
	}
}
