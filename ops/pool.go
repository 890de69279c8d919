package ops

import (
	"fmt"
	"math"

	"gorun/ops/internal/vec"
)

// Pooling over the planes of x[N,C,H,W]: max pooling (with the index of
// each maximum, for the gradient), average pooling, and the global average
// of each plane; and their gradients.

const (
	// MaxPool2D: in x[N,C,H,W]; out y[N,C,OH,OW] and the index (in Idx)
	// within each H×W plane of the element chosen. Attrs: Kernel, Stride.
	// No padding; floor division, as PyTorch's default.
	MaxPool2D Op = "maxpool2d"

	// MaxPool2DGrad: in dy[N,C,OH,OW], index (Idx, from MaxPool2D); out
	// dx[N,C,H,W].
	MaxPool2DGrad Op = "maxpool2d_grad"

	// AvgPool2D: in x[N,C,H,W]; out y[N,C,OH,OW], the mean of each window
	// over Kernel×Kernel elements, padding included (PyTorch's
	// count_include_pad=True, floor mode). Attrs: Kernel, Stride (0 =
	// Kernel), Padding (at most Kernel/2).
	AvgPool2D Op = "avgpool2d"

	// AvgPool2DGrad: in dy[N,C,OH,OW]; out dx[N,C,H,W]. Attrs: as
	// AvgPool2D.
	AvgPool2DGrad Op = "avgpool2d_grad"

	// GlobalAvgPool2D: in x[N,C,H,W]; out y[N,C,1,1], the mean of each
	// H×W plane (adaptive_avg_pool2d(x, 1)).
	GlobalAvgPool2D Op = "global_avgpool2d"

	// GlobalAvgPool2DGrad: in dy[N,C,1,1]; out dx[N,C,H,W] = dy/(H·W).
	GlobalAvgPool2DGrad Op = "global_avgpool2d_grad"
)

var poolOps = []*Def{
	{
		Op: MaxPool2D, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}, {Name: "index", Int: true}}, Autocast: AutocastExact,
		Shape:    func(a *Attrs, in [][]int) ([][]int, error) { return inferMaxPool2D(a, in[0]) },
		Grad:     gradWithOut(MaxPool2DGrad, 1),
		Kernel32: maxPool2D[float32], Kernel64: maxPool2D[float64],
	},
	{
		Op: MaxPool2DGrad, In: []Input{{Name: "dy"}, {Name: "index", Int: true}}, Out: []Output{{Name: "dx"}},
		Kernel32: maxPool2DGrad[float32], Kernel64: maxPool2DGrad[float64],
	},
	{
		Op: AvgPool2D, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}},
		Shape:    func(a *Attrs, in [][]int) ([][]int, error) { return inferAvgPool2D(a, in[0]) },
		Grad:     gradOfDy(AvgPool2DGrad),
		Kernel32: avgPool2D[float32], Kernel64: avgPool2D[float64],
	},
	{
		Op: AvgPool2DGrad, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "dx"}},
		Kernel32: avgPool2DGrad[float32], Kernel64: avgPool2DGrad[float64],
	},
	{
		Op: GlobalAvgPool2D, In: []Input{{Name: "input"}}, Out: []Output{{Name: "y"}},
		Shape: func(a *Attrs, in [][]int) ([][]int, error) {
			x := in[0]
			if len(x) != 4 {
				return nil, fmt.Errorf("global_avgpool2d: input must be [N C H W], got %v", x)
			}
			return [][]int{{x[0], x[1], 1, 1}}, nil
		},
		Grad:     gradOfDy(GlobalAvgPool2DGrad),
		Kernel32: globalAvgPool2D[float32], Kernel64: globalAvgPool2D[float64],
	},
	{
		Op: GlobalAvgPool2DGrad, In: []Input{{Name: "dy"}}, Out: []Output{{Name: "dx"}},
		Kernel32: globalAvgPool2DGrad[float32], Kernel64: globalAvgPool2DGrad[float64],
	},
}

func inferMaxPool2D(a *Attrs, x []int) ([][]int, error) {
	if len(x) != 4 {
		return nil, fmt.Errorf("maxpool2d: input must be [N C H W], got %v", x)
	}
	k, s := a.Kernel, poolStride(a)
	if k < 1 {
		return nil, fmt.Errorf("maxpool2d: kernel must be at least 1, got %d", k)
	}
	if s < 1 {
		return nil, fmt.Errorf("maxpool2d: stride must be at least 1, got %d", s)
	}
	if x[2] < k || x[3] < k {
		return nil, fmt.Errorf("maxpool2d: kernel %d does not fit input %d×%d", k, x[2], x[3])
	}
	y := []int{x[0], x[1], (x[2]-k)/s + 1, (x[3]-k)/s + 1}
	return [][]int{y, clone(y)}, nil
}

func inferAvgPool2D(a *Attrs, x []int) ([][]int, error) {
	if len(x) != 4 {
		return nil, fmt.Errorf("avgpool2d: input must be [N C H W], got %v", x)
	}
	k, s, p := a.Kernel, poolStride(a), a.Padding
	if k < 1 {
		return nil, fmt.Errorf("avgpool2d: kernel must be at least 1, got %d", k)
	}
	if s < 1 {
		return nil, fmt.Errorf("avgpool2d: stride must be at least 1, got %d", s)
	}
	if p < 0 || 2*p > k {
		return nil, fmt.Errorf("avgpool2d: padding must be between 0 and half the kernel (%d), got %d", k/2, p)
	}
	if x[2]+2*p < k || x[3]+2*p < k {
		msg := fmt.Sprintf("avgpool2d: kernel %d does not fit input %d×%d", k, x[2], x[3])
		if p > 0 {
			msg += fmt.Sprintf(" with padding %d", p)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return [][]int{{x[0], x[1], (x[2]+2*p-k)/s + 1, (x[3]+2*p-k)/s + 1}}, nil
}

// poolStride is MaxPool2D's and AvgPool2D's stride; 0 means PyTorch's
// default, the kernel.
func poolStride(a *Attrs) int {
	if a.Stride == 0 {
		return a.Kernel
	}
	return a.Stride
}

// maxPool2D: in x[N,C,H,W]; out y[N,C,OH,OW] and idx[N,C,OH,OW] (Idx), the
// position within the H×W plane of each chosen element. As PyTorch's CPU
// kernel: the first maximum wins on ties, and a NaN is always taken.
func maxPool2D[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y, idx := in[0], out[0], out[1]
	n, ch, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	k, s := a.Kernel, poolStride(a)
	oh, ow := (h-k)/s+1, (w-k)/s+1
	hw, ohw := h*w, oh*ow
	negInf := T(math.Inf(-1))
	if k == 2 && s == 2 && is32[T]() {
		vec.MaxPool2x2(view[float32](x.Data), view[float32](y.Data), idx.Idx, n*ch, h, w, oh, ow)
		return
	}
	for p := 0; p < n*ch; p++ {
		xp := x.Data[p*hw:][:hw]
		yp := y.Data[p*ohw:][:ohw]
		ip := idx.Idx[p*ohw:][:ohw]
		if k == 2 && s == 2 {
			maxPool2x2(xp, yp, ip, w, oh, ow)
			continue
		}
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				first := oy*s*w + ox*s
				best, m := first, negInf
				for ky := 0; ky < k; ky++ {
					row := first + ky*w
					for kx, v := range xp[row : row+k] {
						if v > m || v != v {
							m, best = v, row+kx
						}
					}
				}
				yp[oy*ow+ox] = m
				ip[oy*ow+ox] = int32(best)
			}
		}
	}
}

// maxPool2x2 is maxPool2D's common case, kernel 2 and stride 2, on one
// plane of width w.
func maxPool2x2[T Float](xp, yp []T, ip []int32, w, oh, ow int) {
	for oy := 0; oy < oh; oy++ {
		r0 := xp[2*oy*w:][:2*ow]
		r1 := xp[(2*oy+1)*w:][:2*ow]
		yr := yp[oy*ow:][:ow]
		ir := ip[oy*ow:][:ow]
		base := 2 * oy * w
		for ox := range yr {
			j := 2 * ox
			m, best := r0[j], base+j
			if v := r0[j+1]; v > m || v != v {
				m, best = v, base+j+1
			}
			if v := r1[j]; v > m || v != v {
				m, best = v, base+w+j
			}
			if v := r1[j+1]; v > m || v != v {
				m, best = v, base+w+j+1
			}
			yr[ox] = m
			ir[ox] = int32(best)
		}
	}
}

// maxPool2DGrad: in dy[N,C,OH,OW], idx (Idx); out dx[N,C,H,W].
func maxPool2DGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, idx, dx := in[0], in[1], out[0]
	ohw := dy.Shape[2] * dy.Shape[3]
	hw := dx.Shape[2] * dx.Shape[3]
	planes := dy.Shape[0] * dy.Shape[1]
	if is32[T]() && a != nil && a.Kernel == 2 && poolStride(a) == 2 {
		// Windows do not overlap: each element of dx is written once.
		vec.MaxPool2x2Grad(view[float32](dy.Data), idx.Idx, view[float32](dx.Data), planes,
			dx.Shape[2], dx.Shape[3], dy.Shape[2], dy.Shape[3])
		return
	}
	clear(dx.Data[:planes*hw])
	for p := 0; p < planes; p++ {
		dxp := dx.Data[p*hw:][:hw]
		ip := idx.Idx[p*ohw:][:ohw]
		for j, g := range dy.Data[p*ohw:][:ohw] {
			dxp[ip[j]] += g
		}
	}
}

// avgPool2D: in x[N,C,H,W]; out y[N,C,OH,OW], each the sum of its
// Kernel×Kernel window over Kernel² (padding counts as zeros, as PyTorch's
// count_include_pad=True; floor mode, so no window reaches past the
// padding).
func avgPool2D[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := y.Shape[2], y.Shape[3]
	k, s, p := a.Kernel, poolStride(a), a.Padding
	hw, ohw := h*w, oh*ow
	inv := 1 / float64(k*k)
	for q := 0; q < x.Shape[0]*x.Shape[1]; q++ {
		xp := x.Data[q*hw:][:hw]
		yp := y.Data[q*ohw:][:ohw]
		for oy := 0; oy < oh; oy++ {
			y0, y1 := max(oy*s-p, 0), min(oy*s-p+k, h)
			for ox := 0; ox < ow; ox++ {
				x0, x1 := max(ox*s-p, 0), min(ox*s-p+k, w)
				var sum T
				for iy := y0; iy < y1; iy++ {
					for _, v := range xp[iy*w+x0 : iy*w+x1] {
						sum += v
					}
				}
				yp[oy*ow+ox] = T(float64(sum) * inv)
			}
		}
	}
}

// avgPool2DGrad: in dy[N,C,OH,OW]; out dx[N,C,H,W]: each window's dy over
// Kernel² added into the window's elements inside the input.
func avgPool2DGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, dx := in[0], out[0]
	h, w := dx.Shape[2], dx.Shape[3]
	oh, ow := dy.Shape[2], dy.Shape[3]
	k, s, p := a.Kernel, poolStride(a), a.Padding
	hw, ohw := h*w, oh*ow
	inv := 1 / float64(k*k)
	planes := dy.Shape[0] * dy.Shape[1]
	clear(dx.Data[:planes*hw])
	for q := 0; q < planes; q++ {
		dxp := dx.Data[q*hw:][:hw]
		dyp := dy.Data[q*ohw:][:ohw]
		for oy := 0; oy < oh; oy++ {
			y0, y1 := max(oy*s-p, 0), min(oy*s-p+k, h)
			for ox := 0; ox < ow; ox++ {
				x0, x1 := max(ox*s-p, 0), min(ox*s-p+k, w)
				g := T(float64(dyp[oy*ow+ox]) * inv)
				for iy := y0; iy < y1; iy++ {
					addScalar(dxp[iy*w+x0:iy*w+x1], g)
				}
			}
		}
	}
}

// globalAvgPool2D: in x[N,C,H,W]; out y[N,C,1,1], the mean of each plane
// (summed in float64).
func globalAvgPool2D[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	x, y := in[0], out[0]
	planes, hw := x.Shape[0]*x.Shape[1], x.Shape[2]*x.Shape[3]
	inv := 1 / float64(hw)
	for q := range y.Data[:planes] {
		var s float64
		for _, v := range x.Data[q*hw:][:hw] {
			s += float64(v)
		}
		y.Data[q] = T(s * inv)
	}
}

// globalAvgPool2DGrad: in dy[N,C,1,1]; out dx[N,C,H,W] = dy/(H·W).
func globalAvgPool2DGrad[T Float](c *Ctx[T], a *Attrs, in, out []*Buf[T]) {
	dy, dx := in[0], out[0]
	planes, hw := dx.Shape[0]*dx.Shape[1], dx.Shape[2]*dx.Shape[3]
	inv := 1 / float64(hw)
	for q, g := range dy.Data[:planes] {
		v := T(float64(g) * inv)
		dp := dx.Data[q*hw:][:hw]
		for i := range dp {
			dp[i] = v
		}
	}
}
