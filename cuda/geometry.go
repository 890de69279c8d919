package cuda

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
