package target

import (
	"slices"
	"strings"
	"testing"

	"gorun/ops"
)

// TestRegisterAndLookup: targets are found by name and by the transports
// they bring; a built Target replaces the one registered for builds
// without the backend.
func TestRegisterAndLookup(t *testing.T) {
	lacking := &Target{Name: "tgpu", Keys: []Key{Bool("eager", false, "doc")}, Hint: "build it",
		Transports: []Transport{{Name: "tlink", Hint: "build it with tlink"}}}
	Register(lacking)
	if got := Lookup("tgpu"); got != lacking || got.Built() {
		t.Fatalf("Lookup(tgpu) = %+v", got)
	}
	if got := TransportOwner("tlink"); got != lacking {
		t.Errorf("TransportOwner(tlink) = %v", got)
	}
	if TransportOwner("inproc") != nil || Lookup("nope") != nil {
		t.Error("unknown names are found")
	}
	built := *lacking
	built.Supports = func(op ops.Op) bool { return op != ops.Invalid && op != ops.Conv2DPool }
	built.Declines = map[ops.Op]string{ops.Conv2DPool: "no kernel"}
	Register(&built)
	if got := Lookup("tgpu"); got != &built || !got.Built() {
		t.Errorf("the built Target did not replace the lacking one: %+v", got)
	}
	if !slices.Contains(Names(), "tgpu") || Lookup("tgpu").Key("eager") == nil || Lookup("tgpu").Key("lazy") != nil {
		t.Errorf("Names %v, or Key", Names())
	}
}

// TestRegisterRefusesWrongTargets: a Target that cannot be right panics
// where it registers.
func TestRegisterRefusesWrongTargets(t *testing.T) {
	Register(&Target{Name: "towner", Transports: []Transport{{Name: "tshared"}}})
	for name, tg := range map[string]*Target{
		"no name":         {},
		"key without it":  {Name: "tk", Keys: []Key{{Name: "k"}}},
		"declines a kept": {Name: "td", Supports: func(ops.Op) bool { return true }, Declines: map[ops.Op]string{ops.ReLU: "x"}},
		"shared link":     {Name: "tother", Transports: []Transport{{Name: "tshared"}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			Register(tg)
		}()
	}
}

// TestKeys: Bool and Path keys take their values and say what is wrong
// with others, naming TOML types as the TOML spec does.
func TestKeys(t *testing.T) {
	b := Bool("eager", false, "doc")
	if v, msg := b.Parse(true); v != true || msg != "" || b.Default != false || b.Text {
		t.Errorf("Bool: %v %q", v, msg)
	}
	if _, msg := b.Parse(int64(1)); msg != "want true or false, found integer 1" {
		t.Errorf("Bool(1): %q", msg)
	}
	p := Path("lib", "/usr/lib/libx.so", "doc")
	if v, msg := p.Parse("/opt/libx.so"); v != "/opt/libx.so" || msg != "" || p.Default != "" || !p.Text {
		t.Errorf("Path: %v %q", v, msg)
	}
	for _, v := range []any{"", 3.5} {
		if _, msg := p.Parse(v); !strings.HasPrefix(msg, `want the path of a file, such as "/usr/lib/libx.so", found `) {
			t.Errorf("Path(%v): %q", v, msg)
		}
	}
	for v, want := range map[any]string{"two": `string "two"`, int64(3): "integer 3", 2.5: "float 2.5", false: "boolean false", nil: "nothing"} {
		if got := Found(v); got != want {
			t.Errorf("Found(%v) = %q, want %q", v, got, want)
		}
	}
	if Found(map[string]any{}) != "a table" || Found([]any{}) != "an array" || Found([]map[string]any{}) != "an array of tables" {
		t.Error("Found of tables and arrays")
	}
}
