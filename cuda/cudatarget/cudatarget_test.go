package cudatarget

import (
	"testing"

	"gorun/engine/target"
)

// TestRegisteredWithoutOps: importing the package registers cuda as a
// backend this build may lack (no ops), with its table and transport,
// and Read gives each key's default when the settings leave it out.
func TestRegisteredWithoutOps(t *testing.T) {
	tg := target.Lookup("cuda")
	if tg == nil || tg.Hint == "" || tg.HostMemory || tg.HostCores {
		t.Fatalf("registered cuda Target %+v", tg)
	}
	if o := target.TransportOwner("nccl"); o == nil || o.Name != "cuda" {
		t.Errorf("nccl comes with %v", o)
	}
	defaults := map[string]any{}
	for _, k := range tg.Keys {
		if v, msg := k.Parse(k.Default); msg == "" && v != k.Default {
			t.Errorf("key %s: default %v parses to %v", k.Name, k.Default, v)
		}
		defaults[k.Name] = k.Default
	}
	if got := Read(defaults); got != (Settings{}) {
		t.Errorf("Read(defaults) = %+v", got)
	}
	if got := Read(nil); got != (Settings{}) {
		t.Errorf("Read(nil) = %+v", got)
	}
	want := Settings{Eager: true, Cublas: "/a/libcublas.so.12", NCCL: "/b/libnccl.so.2"}
	if got := Read(map[string]any{"eager": true, "cublas": "/a/libcublas.so.12", "nccl": "/b/libnccl.so.2"}); got != want {
		t.Errorf("Read = %+v, want %+v", got, want)
	}
	if got := Read(map[string]any{"cublaslt": false}); got != (Settings{NoCublasLt: true}) {
		t.Errorf("Read(cublaslt = false) = %+v", got)
	}
}
