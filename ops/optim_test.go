package ops

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// optim_golden.json holds parameters after each of several steps of
// torch.optim.SGD, torch.optim.Adam and torch.optim.AdamW (PyTorch 1.13), in
// float32 and float64; testdata/gen_optim_golden.py writes it.

type optimGolden struct {
	Torch string
	Param []float64
	Grads [][]float64
	Cases []struct {
		Name, Kind string
		Attrs      struct {
			LR          float64 `json:"lr"`
			WeightDecay float64 `json:"weight_decay"`
			Momentum    float64
			Dampening   float64
			Nesterov    bool
			Beta1       float64
			Beta2       float64
			Eps         float64
		}
		Float32, Float64 [][]float64
	}
}

func TestOptimizersMatchPyTorch(t *testing.T) {
	var g optimGolden
	loadJSON(t, "optim_golden.json", &g)
	if len(g.Cases) < 6 {
		t.Fatalf("optim_golden.json has %d cases", len(g.Cases))
	}
	for _, gc := range g.Cases {
		ga := gc.Attrs
		a := &Attrs{LR: ga.LR, WeightDecay: ga.WeightDecay, Momentum: ga.Momentum, Dampening: ga.Dampening,
			Nesterov: ga.Nesterov, Beta1: ga.Beta1, Beta2: ga.Beta2, Eps: ga.Eps}
		op := map[string]Op{"sgd": SGDStep, "adam": AdamStep, "adamw": AdamWStep}[gc.Kind]
		if op == Invalid {
			t.Fatalf("%s: unknown kind %q", gc.Name, gc.Kind)
		}
		t.Run(gc.Name+"/float64", func(t *testing.T) {
			runOptim(t, Kernels64, op, a, g.Param, g.Grads, gc.Float64, 0)
		})
		t.Run(gc.Name+"/float32", func(t *testing.T) {
			runOptim(t, Kernels32, op, a, g.Param, g.Grads, gc.Float32, 0)
		})
	}
}

// runOptim steps from param with the given gradients and compares the
// parameters after every step. float64 results must agree to 1e-14
// relative; float32 ones bit for bit (PyTorch's float32 kernels fuse the
// same multiply-adds as ours, see optim.go; a golden file written by a
// PyTorch without AVX2 kernels would differ by a few units in the last
// place).
func runOptim[T Float](t *testing.T, k map[Op]Kernel[T], op Op, a *Attrs, param []float64, grads, want [][]float64, float32ULP int) {
	n := len(param)
	p := fromGolden[T](&goldenTensor{Shape: []int{n}, Data: param})
	s1, s2 := zeroBuf[T]([]int{n}), zeroBuf[T]([]int{n})
	c := &Ctx[T]{}
	_, is32 := any(T(0)).(float32)
	worst := 0.0
	for step, gr := range grads {
		g := fromGolden[T](&goldenTensor{Shape: []int{n}, Data: gr})
		c.Step = step + 1
		in := []*Buf[T]{p, g, s1, s2}
		if op == SGDStep {
			in = in[:3]
			if a.Momentum == 0 {
				in[2] = nil // unused
			}
		}
		k[op](c, a, in, nil)
		for i, w := range want[step] {
			got := float64(p.Data[i])
			var bad bool
			if !is32 {
				d := math.Abs(got-w) / (1e-300 + math.Abs(w))
				worst = max(worst, d)
				bad = d > 1e-14
			} else {
				d := float64(ulps32(float32(got), float32(w)))
				worst = max(worst, d)
				bad = d > float64(float32ULP)
			}
			if bad {
				t.Fatalf("step %d: param[%d] = %.17g, PyTorch %.17g", step+1, i, got, w)
			}
		}
	}
	if !is32 {
		t.Logf("worst relative difference %.2g", worst)
	} else {
		t.Logf("worst difference %v ulp", worst)
	}
}

// ulps32 is the distance between a and b in float32 units in the last
// place.
func ulps32(a, b float32) int64 {
	ia, ib := int64(int32(math.Float32bits(a))), int64(int32(math.Float32bits(b)))
	if ia < 0 {
		ia = math.MinInt32 - ia
	}
	if ib < 0 {
		ib = math.MinInt32 - ib
	}
	d := ia - ib
	if d < 0 {
		d = -d
	}
	return d
}

// TestClipGradNormMatchesPyTorch compares ClipGradNorm over one buffer of
// three gradients with torch.nn.utils.clip_grad_norm_ over the three
// (testdata/gen_clip_golden.py), below and above the norm.
func TestClipGradNormMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("testdata/clip_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Grads []float32
		Cases []struct {
			MaxNorm float64 `json:"max_norm"`
			Norm    float64
			After   []float32
		}
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	for _, c := range g.Cases {
		buf := &Buf[float32]{Shape: []int{len(g.Grads)}, Data: append([]float32(nil), g.Grads...)}
		Kernels32[ClipGradNorm](&Ctx[float32]{}, &Attrs{MaxNorm: c.MaxNorm}, []*Buf[float32]{buf}, nil)
		for i, want := range c.After {
			if d := math.Abs(float64(buf.Data[i] - want)); d > 1e-6*math.Max(1, math.Abs(float64(want))) {
				t.Fatalf("max_norm %g: element %d is %v, PyTorch %v", c.MaxNorm, i, buf.Data[i], want)
			}
		}
	}
}

// TestClipInPartsMatchesWhole: clipping gradients sharded in parts
// (GradNormSq of each part, the sums added, ClipGradScale of each part)
// scales them as ClipGradNorm over the whole buffer does, below and above
// the norm (the parts' sums are rounded to float32, so not to the bit).
func TestClipInPartsMatchesWhole(t *testing.T) {
	b, err := os.ReadFile("testdata/clip_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Grads []float32
		Cases []struct {
			MaxNorm float64 `json:"max_norm"`
			After   []float32
		}
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	n := len(g.Grads)
	cuts := []int{0, n / 3, n / 2, n} // uneven parts
	for _, c := range g.Cases {
		grads := append([]float32(nil), g.Grads...)
		sq := &Buf[float32]{Shape: []int{len(cuts) - 1}, Data: make([]float32, len(cuts)-1)}
		parts := make([]*Buf[float32], len(cuts)-1)
		for i := range parts {
			parts[i] = &Buf[float32]{Shape: []int{cuts[i+1] - cuts[i]}, Data: grads[cuts[i]:cuts[i+1]]}
			one := &Buf[float32]{Shape: []int{1}, Data: sq.Data[i : i+1]}
			Kernels32[GradNormSq](&Ctx[float32]{}, &Attrs{}, []*Buf[float32]{parts[i], one}, nil)
		}
		for _, part := range parts {
			Kernels32[ClipGradScale](&Ctx[float32]{}, &Attrs{MaxNorm: c.MaxNorm}, []*Buf[float32]{part, sq}, nil)
		}
		for i, want := range c.After {
			if d := math.Abs(float64(grads[i] - want)); d > 1e-6*math.Max(1, math.Abs(float64(want))) {
				t.Fatalf("max_norm %g: element %d is %v in parts, PyTorch %v", c.MaxNorm, i, grads[i], want)
			}
		}
	}
}
