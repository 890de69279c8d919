package cudatarget

import (
	"testing"

	"gorun/engine/target"
)

// TestTF32Key: [cuda] tf32 is a bool, false by default, and reaches the
// devices' Settings.
func TestTF32Key(t *testing.T) {
	var key *target.Key
	for i, k := range Target().Keys {
		if k.Name == "tf32" {
			key = &Target().Keys[i]
		}
	}
	if key == nil {
		t.Fatal("no tf32 key in the [cuda] table")
	}
	if v, msg := key.Parse(true); msg != "" || v != true {
		t.Errorf("tf32 = true parses to %v (%s)", v, msg)
	}
	if _, msg := key.Parse("yes"); msg == "" {
		t.Error(`tf32 = "yes" accepted`)
	}
	if key.Default != false {
		t.Errorf("tf32 defaults to %v", key.Default)
	}
	if !Read(map[string]any{"tf32": true}).TF32 || Read(nil).TF32 {
		t.Error("Read does not carry tf32")
	}
}
