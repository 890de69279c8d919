package cuda

import (
	"fmt"

	"gorun/ops"
)

// geometry is a one-dimensional launch: Grid blocks of Block threads with
// Shared bytes of dynamic shared memory (cuda/kernels/kernels.h: "All grids
// and blocks are one-dimensional").
type geometry struct {
	Grid, Block, Shared int
}

// blockSize is the block every gorun kernel is launched with.
const blockSize = 256

// maxGrid caps elementwise grids; their kernels loop with a grid stride,
// so any grid of at least one block covers every element.
const maxGrid = 1 << 20

// elementwise is kernels.h's ELEMENTWISE(n): blocks of 256 threads,
// ceil(n/256) of them (at least one, at most maxGrid).
func elementwise(n int) geometry {
	g := (n + blockSize - 1) / blockSize
	return geometry{Grid: min(max(g, 1), maxGrid), Block: blockSize}
}

// oneBlock is kernels.h's ONE_BLOCK: one block of exactly 256 threads.
func oneBlock() geometry { return geometry{Grid: 1, Block: blockSize} }

// blockPer is kernels.h's BLOCK_PER(m): m blocks of exactly 256 threads,
// block b doing item b. With m = 0 there is nothing to launch (Grid 0).
func blockPer(m int) geometry { return geometry{Grid: max(m, 0), Block: blockSize} }

// empty reports whether the launch has no blocks (and is skipped).
func (g geometry) empty() bool { return g.Grid <= 0 }

// The split sum (kernels.h; gorun_bias_partial, gorun_bias_finish) cuts
// each channel's elements into chunks of about sumChunk elements, at most
// maxSplit of them. One block per channel leaves most of the GPU idle when
// the channels are few and long (conv1's bias gradient at batch 512: 10
// blocks of 295k elements each); a chunk of 8K elements is 32 loads per
// thread of a 256-thread block, enough to hide the block's start and its
// reduction, while a short channel still gets a single block.
const (
	sumChunk = 8192
	// maxSplit bounds the partials per channel, so that the finishing
	// block (256 threads) adds at most one per thread and the scratch stays
	// small; past maxSplit·sumChunk elements the chunks grow instead.
	maxSplit = 256
)

// splitSum returns the number of chunks s (1 to maxSplit) a channel of
// total elements is cut into and their length chunk (s·chunk ≥ total, and
// every chunk but the last is full). s = 1 means one block per channel,
// gorun_bias_grad alone.
func splitSum(total int) (s, chunk int) {
	s = min(max((total+sumChunk-1)/sumChunk, 1), maxSplit)
	return s, (total + s - 1) / s
}

// splitPartials is how many partials (doubles of scratch) a split sum over
// c channels of total elements needs: none when it runs in one phase.
func splitPartials(c, total int) int {
	if s, _ := splitSum(total); s > 1 {
		return c * s
	}
	return 0
}

// embeddingThreads is about how many threads gorun_embedding_grad should
// run: each owns one column of a bucket of rows and scans every id, so
// more buckets mean more parallelism and more scanning.
const embeddingThreads = 1 << 15

// embeddingRowsPer is gorun_embedding_grad's rows_per for dW[v, d]: the
// rows of one bucket, chosen so that the buckets times d come to about
// embeddingThreads threads (at least one row per bucket, at most v).
func embeddingRowsPer(v, d int) int {
	buckets := min(max((embeddingThreads+d-1)/max(d, 1), 1), max(v, 1))
	return max((v+buckets-1)/buckets, 1)
}

// permuteArgs is gorun_permute's geometry for x of shape (live) permuted
// by perm: y's dimensions and, for each, the stride in x of the dimension
// it comes from, padded at the front to ops.MaxPermRank with 1 and 0; and
// y's elements.
func permuteArgs(shape []int, perm [ops.MaxPermRank]int8) (dims, strides [ops.MaxPermRank]int, n int, err error) {
	r := len(shape)
	if r == 0 || r > ops.MaxPermRank {
		return dims, strides, 0, fmt.Errorf("permute of rank %d: want 1 to %d", r, ops.MaxPermRank)
	}
	xs := make([]int, r)
	s := 1
	for i := r - 1; i >= 0; i-- {
		xs[i] = s
		s *= shape[i]
	}
	pad := ops.MaxPermRank - r
	for i := range pad {
		dims[i] = 1
	}
	for i, p := range perm[:r] {
		if p < 0 || int(p) >= r {
			return dims, strides, 0, fmt.Errorf("permute of rank %d: dimension %d in %v", r, p, perm[:r])
		}
		dims[pad+i], strides[pad+i] = shape[p], xs[p]
	}
	return dims, strides, s, nil
}

// clipGrid caps gorun_clip_grad_norm's grid: each block first adds up the
// partial sums of squares, so fewer, longer-looping blocks do that less.
const clipGrid = 1024
