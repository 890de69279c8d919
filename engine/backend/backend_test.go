package backend_test

import (
	"strings"
	"testing"

	"gorun/engine/backend"
	_ "gorun/engine/backend/cpu"
	"gorun/ops"
)

// TestEveryBackendHasEveryOp enumerates the op set against every backend
// this build has (cpu; cuda too in a -tags cuda build), so that an op added
// to ops without a kernel in some backend fails here. A backend may
// decline an op by saying why (Declines, which cuda has for the CPU-only
// fusions).
func TestEveryBackendHasEveryOp(t *testing.T) {
	names := backend.Names()
	if len(names) == 0 || names[0] != "cpu" {
		t.Fatalf("backends %v: want cpu first", names)
	}
	for _, name := range names {
		b, err := backend.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range ops.All() {
			reason := ""
			if d, ok := b.(interface{ Declines(ops.Op) string }); ok {
				reason = d.Declines(op)
			}
			if b.Supports(op) == (reason != "") {
				t.Errorf("backend %s: op %s supported %v, declined %q: want a kernel or a reason, not both", name, op, b.Supports(op), reason)
			}
		}
		if b.Supports(ops.Invalid) {
			t.Errorf("backend %s claims a kernel for the invalid op", name)
		}
	}
}

// TestUnknownBackend: asking for a backend this build lacks says how to
// get one.
func TestUnknownBackend(t *testing.T) {
	if _, err := backend.Get("tpu"); err == nil {
		t.Error("backend tpu exists")
	}
	names := backend.Names()
	for _, n := range names {
		if n == "cuda" {
			t.Skip("SKIP: this build has the cuda backend")
		}
	}
	_, err := backend.Get("cuda")
	if err == nil || !strings.Contains(err.Error(), "make build-cuda") {
		t.Errorf("backend cuda in a build without it: %v", err)
	}
}
