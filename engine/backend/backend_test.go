package backend_test

import (
	"slices"
	"strings"
	"testing"

	_ "gorun/cuda/cudatarget" // cuda's description, in every build
	"gorun/engine"
	"gorun/engine/backend"
	_ "gorun/engine/backend/cpu"
	"gorun/engine/target"
	"gorun/ops"
)

// TestEveryBackendHasEveryOp enumerates the op set against every backend
// this build has (cpu; cuda too in a -tags cuda build, cuda_test.go), so
// that an op added to ops without a kernel in some backend fails here. A
// backend may decline an op only plainly — in its Target's Declines, with
// a reason — and only an op the compiler emits for a target that supports
// it (engine.TargetFusions), so that no Plan for the backend holds it.
func TestEveryBackendHasEveryOp(t *testing.T) {
	names := backend.Names()
	if len(names) == 0 || names[0] != "cpu" {
		t.Fatalf("backends %v: want cpu first", names)
	}
	optional := engine.TargetFusions()
	for _, name := range names {
		b, err := backend.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		tg := b.Target()
		if tg.Name != name || target.Lookup(name) == nil || !target.Lookup(name).Built() {
			t.Errorf("backend %s: its Target is %q, registered %v", name, tg.Name, target.Lookup(name))
		}
		for _, op := range ops.All() {
			why, declined := tg.Declines[op]
			switch {
			case tg.Supports(op) && declined:
				t.Errorf("backend %s declines op %s, which it supports", name, op)
			case tg.Supports(op):
			case !declined:
				t.Errorf("backend %s has no kernel for op %s", name, op)
			case why == "":
				t.Errorf("backend %s declines op %s without a reason", name, op)
			case !slices.Contains(optional, op):
				t.Errorf("backend %s declines op %s, which the compiler emits for every backend (%s)", name, op, why)
			}
		}
		if tg.Supports(ops.Invalid) {
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
