package ops

import (
	"encoding/json"
	"math"
	"testing"
)

// The Round op's gradient checks (in float64 the op is the identity, a
// cast's derivative; see Round), one per format, with the other ops'.
func init() {
	gradCases = append(gradCases,
		gradCase{name: "round/bf16", op: Round, attrs: Attrs{Precision: BF16}, in: [][]int{{3, 4}}, capN: 5,
			bwd: []bwdStep{{op: Round, args: []ref{dyOf(0)}}}},
		gradCase{name: "round/fp16", op: Round, attrs: Attrs{Precision: FP16}, in: [][]int{{2, 3, 2}}, capN: 4,
			bwd: []bwdStep{{op: Round, args: []ref{dyOf(0)}}}},
	)
}

// TestRoundMatchesPyTorch runs Round's float32 kernel, forward and as its
// own gradient rule, on testdata/round_golden.json (gen_round_golden.py):
// PyTorch 1.13's x.to(torch.bfloat16) and x.half(), and the gradient
// autograd gives through them, compared bit for bit (NaN as NaN).
func TestRoundMatchesPyTorch(t *testing.T) {
	type side struct{ Y, Dx []uint32 }
	var g struct {
		Torch      string
		X, Dy      []uint32
		BF16, FP16 side
	}
	loadJSON(t, "round_golden.json", &g)
	if len(g.X) < 200 || len(g.X) != len(g.Dy) {
		t.Fatalf("round_golden.json: %d inputs, %d cotangents", len(g.X), len(g.Dy))
	}
	f32 := func(u []uint32) *Buf[float32] {
		b := &Buf[float32]{Shape: []int{len(u)}, Data: make([]float32, len(u))}
		for i, v := range u {
			b.Data[i] = math.Float32frombits(v)
		}
		return b
	}
	for _, c := range []struct {
		p    Precision
		want side
	}{{BF16, g.BF16}, {FP16, g.FP16}} {
		a := Attrs{Precision: c.p}
		for _, dir := range []struct {
			name    string
			in      []uint32
			want    []uint32
			forward bool
		}{{"forward", g.X, c.want.Y, true}, {"gradient", g.Dy, c.want.Dx, false}} {
			out := &Buf[float32]{Shape: []int{len(dir.in)}, Data: make([]float32, len(dir.in))}
			Kernels32[Round](&Ctx[float32]{}, &a, []*Buf[float32]{f32(dir.in)}, []*Buf[float32]{out})
			bad := 0
			for i, w := range dir.want {
				got := out.Data[i]
				wf := math.Float32frombits(w)
				if wf != wf && got != got {
					continue
				}
				if math.Float32bits(got) != w {
					if bad++; bad <= 5 {
						t.Errorf("%v %s: %.9g (%#08x) → %.9g (%#08x), PyTorch %.9g (%#08x)", c.p, dir.name,
							math.Float32frombits(dir.in[i]), dir.in[i], got, math.Float32bits(got), wf, w)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%v %s: %d of %d values differ from PyTorch %s", c.p, dir.name, bad, len(dir.want), g.Torch)
			}
		}
	}
}

// TestParsePrecision: the script's spellings, and an error that lists the
// choices.
func TestParsePrecision(t *testing.T) {
	for _, p := range Precisions {
		if got, err := ParsePrecision(p.String()); got != p || err != nil {
			t.Errorf("ParsePrecision(%q) = %v, %v", p.String(), got, err)
		}
	}
	_, err := ParsePrecision("bf8")
	if err == nil || err.Error() != `precision must be "fp32", "bf16" or "fp16", got "bf8"` {
		t.Errorf("ParsePrecision(\"bf8\"): %v", err)
	}
}

// TestLowPrecisionKernelsMatchPyTorch runs the float32 kernels that round
// intermediates under Attrs.Precision = BF16 (LogSoftmax, LogSoftmaxGrad,
// SoftmaxGrad, GELU and GELUGrad in the tanh form) on
// testdata/lowp_golden.json (gen_lowp_golden.py): PyTorch 1.13's CPU
// kernels on bfloat16 tensors, compared bit for bit; one value in 200 may
// differ by one bfloat16 step (a sum in another order).
func TestLowPrecisionKernelsMatchPyTorch(t *testing.T) {
	type io map[string][]uint32
	var g struct {
		Torch string
		K     int
	}
	var raw map[string]json.RawMessage
	loadJSON(t, "lowp_golden.json", &raw)
	if err := json.Unmarshal(raw["torch"], &g.Torch); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw["k"], &g.K); err != nil {
		t.Fatal(err)
	}
	buf := func(u []uint32, shape []int) *Buf[float32] {
		b := &Buf[float32]{Shape: shape, Data: make([]float32, len(u))}
		for i, v := range u {
			b.Data[i] = math.Float32frombits(v)
		}
		return b
	}
	for _, c := range []struct {
		name   string
		op     Op
		approx bool
		in     []string
		want   string
	}{
		{"log_softmax", LogSoftmax, false, []string{"x"}, "y"},
		{"log_softmax_grad", LogSoftmaxGrad, false, []string{"dy", "y"}, "dx"},
		{"softmax_grad", SoftmaxGrad, false, []string{"dy", "y"}, "dx"},
		{"gelu_tanh", GELU, true, []string{"x"}, "y"},
		{"gelu_tanh_grad", GELUGrad, true, []string{"dy", "x"}, "dx"},
	} {
		var vals io
		if err := json.Unmarshal(raw[c.name], &vals); err != nil || len(vals[c.want]) == 0 {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := len(vals[c.want])
		shape := []int{n}
		if !c.approx {
			shape = []int{n / g.K, g.K}
		}
		var in []*Buf[float32]
		for _, name := range c.in {
			in = append(in, buf(vals[name], shape))
		}
		out := &Buf[float32]{Shape: shape, Data: make([]float32, n)}
		a := Attrs{Precision: BF16, Approximate: c.approx}
		Kernels32[c.op](&Ctx[float32]{}, &a, in, []*Buf[float32]{out})
		exact, off := 0, 0
		for i, w := range vals[c.want] {
			got := math.Float32bits(out.Data[i])
			switch {
			case got == w:
				exact++
			case math.Abs(float64(out.Data[i]-math.Float32frombits(w))) <= math.Abs(float64(math.Float32frombits(w)))/128:
				off++
			default:
				t.Errorf("%s[%d] = %.6g, PyTorch %s %.6g", c.name, i, out.Data[i], g.Torch, math.Float32frombits(w))
			}
		}
		if off*200 > n {
			t.Errorf("%s: %d of %d values one bfloat16 step from PyTorch's", c.name, off, n)
		}
		t.Logf("%s: %d of %d values equal to PyTorch's bits, %d one step off", c.name, exact, n, off)
	}
}

// TestGradUnscale: the gradients times Ctx.LossScale (1/S), in place, as
// GradScaler.unscale_ multiplies by its float32 inverse scale; infinities
// and NaN stay.
func TestGradUnscale(t *testing.T) {
	g := &Buf[float32]{Shape: []int{5}, Data: []float32{65536, -3 * 65536, 1, float32(math.Inf(1)), 7}}
	Kernels32[GradUnscale](&Ctx[float32]{LossScale: 1.0 / 65536}, &Attrs{}, []*Buf[float32]{{Shape: []int{4}, Data: g.Data}}, nil)
	want := []float32{1, -3, 1.0 / 65536, float32(math.Inf(1)), 7} // the fifth is past the live length
	for i, w := range want {
		if g.Data[i] != w {
			t.Errorf("element %d = %g, want %g", i, g.Data[i], w)
		}
	}
}
