package runner

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gorun/engine"
	"gorun/safetensors"
	"gorun/script"
)

// TestLegacyCheckpointsResume: checkpoints written by gorun before resume
// keys by meaning (testdata/legacy, see its README) resume — their key,
// which prints every attribute of ops.Attrs, compared through the legacy
// rendering — and the run ends with the parameters and running statistics
// of that gorun's uninterrupted run: bit for bit on the machine that wrote
// them; within legacyTolerance elsewhere (the fixtures' arithmetic is that
// machine's: the C kernels pick AVX-512, AVX2 or plain C by the CPU, and
// the product kernels' sums follow the vector width; on an AMD EPYC with
// AVX2 only, the cnn fixture's whole run made from scratch differs from
// its reference by up to 2.4e-7, while resuming there is bit for bit —
// TestResumeIsBitIdentical checks that on every machine).
func TestLegacyCheckpointsResume(t *testing.T) {
	for _, c := range []struct {
		name    string
		devices int
		step    int // the checkpoint's step
		steps   int // the whole run's
	}{
		{"cnn", 2, 12, 24},
		{"gpt", 1, 47, 94},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join("testdata", "legacy", c.name)
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			state, err := safetensors.ReadFile(statePath(legacyCheckpointPath(dir, c.step)))
			if err != nil {
				t.Fatal(err)
			}
			if f := state.Metadata["plan_format"]; f != "" || state.Metadata["plan"] == "" {
				t.Fatalf("the fixture's key is of format %q (%d bytes), want a key of the format before keys by meaning", f, len(state.Metadata["plan"]))
			}
			s, err := script.Load(filepath.Join("testdata", "legacy", c.name+".star"))
			if err != nil {
				t.Fatal(err)
			}
			p := compile(t, s, c.devices)
			res, err := Run(p, RunOptions{Resume: dir})
			if err != nil {
				t.Fatal(err)
			}
			if res.Steps != c.steps {
				t.Errorf("resumed at step %d and ran to %d, want %d", c.step, res.Steps, c.steps)
			}
			got, err := safetensors.ReadFile(filepath.Join(dir, ModelFile))
			if err != nil {
				t.Fatal(err)
			}
			want, err := safetensors.ReadFile(filepath.Join("testdata", "legacy", c.name+"_model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Names(), want.Names()) {
				t.Fatalf("model.safetensors holds %v, the reference %v", got.Names(), want.Names())
			}
			for _, name := range want.Names() {
				g, _ := got.Get(name)
				w, _ := want.Get(name)
				if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
					t.Errorf("%s: %s %v differs from the reference %s %v", name, g.DType, g.Shape, w.DType, w.Shape)
					continue
				}
				if bytes.Equal(g.Data, w.Data) {
					continue
				}
				if g.DType != "F32" {
					t.Errorf("%s: %s values differ from the reference", name, g.DType)
					continue
				}
				gv, wv := f32s(g.Data), f32s(w.Data)
				for i := range wv {
					if d := math.Abs(float64(gv[i] - wv[i])); d > legacyTolerance*(1+math.Abs(float64(wv[i]))) {
						t.Errorf("%s[%d]: %g, the reference %g (off by %.3g, beyond %g)", name, i, gv[i], wv[i], d, legacyTolerance)
						break
					}
				}
			}
			// The checkpoints the resumed run wrote carry keys by meaning.
			last, err := safetensors.ReadFile(statePath(checkpointPath(dir, c.steps)))
			if err != nil {
				t.Fatal(err)
			}
			if f := last.Metadata["plan_format"]; f != engine.ResumeKeyFormat {
				t.Errorf("the resumed run's checkpoint has a key of format %q, want %q", f, engine.ResumeKeyFormat)
			}
		})
	}
}

// legacyTolerance bounds how far a resumed legacy run may end from its
// reference on a machine other than the one that wrote the fixtures,
// relative to 1 + |value|: the fixtures' arithmetic differs in the last
// bits from machine to machine (2.4e-7 at most seen), a resume that lost
// or changed state by far more.
const legacyTolerance = 1e-6

// f32s reads little-endian float32 values.
func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}
