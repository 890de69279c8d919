//go:build cuda

package cuda

import (
	"gorun/engine"
	"gorun/engine/backend"
	"gorun/ops"
)

// precisionCases are TestOpsAgainstCPU's checks of mixed precision's ops:
// Round to bfloat16 and float16 (also into a gradient that accumulates),
// GradUnscale (by RunCtx.LossScale), and the GEMMs of a bf16 plan
// (cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF, on operands that Round
// made bfloat16 first, as the engine's casts do), batched too.
func precisionCases() []opCase {
	var cs []opCase
	add := func(name string, runs []backend.RunCtx, build func(b *progBuilder) []*engine.Buffer) {
		cs = append(cs, opCase{name: name, build: build, runs: runs})
	}
	for _, p := range []ops.Precision{ops.BF16, ops.FP16} {
		a := ops.Attrs{Precision: p}
		add("round "+p.String(), once, func(b *progBuilder) []*engine.Buffer {
			return fwd(b, ops.Round, a, []*engine.Buffer{b.f("x", true, tb, 9, 7)}, b.f("y", true, tb, 9, 7))
		})
		add("round "+p.String()+" accumulate", accumulate, func(b *progBuilder) []*engine.Buffer {
			return bwd(b, ops.Round, a, true, []*engine.Buffer{b.f("dw", false, 5, 7)}, b.f("grad", false, 5, 7))
		})
	}
	add("grad_unscale", once, func(b *progBuilder) []*engine.Buffer {
		g := b.f("grads", false, 300)
		b.step(engine.PhaseUpdate, ops.GradUnscale, ops.Attrs{}, false, []*engine.Buffer{g})
		return []*engine.Buffer{g}
	})
	bf16 := ops.Attrs{Precision: ops.BF16}
	cast := func(b *progBuilder, x *engine.Buffer, batched bool, shape ...int) *engine.Buffer {
		return fwd(b, ops.Round, bf16, []*engine.Buffer{x}, b.f(x.Name+" bf16", batched, shape...))[0]
	}
	add("linear bf16 (cublasGemmEx)", once, func(b *progBuilder) []*engine.Buffer {
		x := cast(b, b.f("x", true, tb, 40), true, tb, 40)
		w := cast(b, b.f("w", false, 24, 40), false, 24, 40)
		bias := cast(b, b.f("b", false, 24), false, 24)
		return fwd(b, ops.Linear, bf16, []*engine.Buffer{x, w, bias}, b.f("y", true, tb, 24))
	})
	add("batch_matmul bf16 (cublasGemmStridedBatchedEx)", once, func(b *progBuilder) []*engine.Buffer {
		x := cast(b, b.f("x", true, tb, 3, 8, 16), true, tb, 3, 8, 16)
		y := cast(b, b.f("y", true, tb, 3, 8, 16), true, tb, 3, 8, 16)
		return fwd(b, ops.BatchMatMul, ops.Attrs{Precision: ops.BF16, TransB: true}, []*engine.Buffer{x, y}, b.f("z", true, tb, 3, 8, 8))
	})
	return cs
}
