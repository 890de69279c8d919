package torchrand

import "math/big"

// Python is CPython 3's random.Random: the same MT19937 as PyTorch's, but
// seeded with init_by_array, and with Python's getrandbits and
// _randbelow on top. It reproduces, for example, the shuffle of the
// distributed tutorial's DataPartitioner (random.Random(1234).shuffle).
type Python struct {
	mt MT19937
}

// NewPython returns a generator seeded like random.Random(seed) for an int
// seed (CPython 3.2+, version 2 seeding): init_by_array on the 32-bit
// words of |seed|, least significant first (one zero word for 0).
func NewPython(seed *big.Int) *Python {
	n := new(big.Int).Abs(seed)
	var key []uint32
	mask := big.NewInt(0xffffffff)
	for w := new(big.Int).Set(n); w.Sign() > 0; w.Rsh(w, 32) {
		key = append(key, uint32(new(big.Int).And(w, mask).Uint64()))
	}
	if len(key) == 0 {
		key = []uint32{0}
	}
	p := &Python{}
	p.mt.initByArray(key)
	return p
}

// NewPythonInt64 is NewPython for a seed that fits in an int64.
func NewPythonInt64(seed int64) *Python { return NewPython(big.NewInt(seed)) }

// initByArray is MT19937's init_by_array, as CPython's _randommodule.c
// writes it.
func (m *MT19937) initByArray(key []uint32) {
	const n = 624
	m.Seed(19650218)
	mt := &m.state
	i, j := 1, 0
	for k := max(n, len(key)); k > 0; k-- {
		mt[i] = (mt[i] ^ ((mt[i-1] ^ (mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= n {
			mt[0] = mt[n-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k := n - 1; k > 0; k-- {
		mt[i] = (mt[i] ^ ((mt[i-1] ^ (mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= n {
			mt[0] = mt[n-1]
			i = 1
		}
	}
	mt[0] = 0x80000000
	m.next = n
}

// GetRandBits returns random.getrandbits(k) for 0 ≤ k ≤ 64: for k ≤ 32
// the top k bits of one 32-bit output; above, 32-bit words filled from the
// least significant, the last one keeping its top bits.
func (p *Python) GetRandBits(k int) uint64 {
	if k <= 0 {
		return 0
	}
	if k <= 32 {
		return uint64(p.mt.Uint32() >> (32 - k))
	}
	var v uint64
	for shift := 0; k > 0; shift, k = shift+32, k-32 {
		r := p.mt.Uint32()
		if k < 32 {
			r >>= 32 - k
		}
		v |= uint64(r) << shift
	}
	return v
}

// RandBelow returns random.Random._randbelow(n) for n ≥ 1: getrandbits(k)
// with k = n.bit_length(), drawn again while it is ≥ n.
func (p *Python) RandBelow(n uint64) uint64 {
	k := bitLength(n)
	r := p.GetRandBits(k)
	for r >= n {
		r = p.GetRandBits(k)
	}
	return r
}

func bitLength(n uint64) int {
	k := 0
	for ; n != 0; n >>= 1 {
		k++
	}
	return k
}

// Shuffle permutes x as random.Random.shuffle does: for i from len(x)-1
// down to 1, swap x[i] with x[_randbelow(i+1)].
func (p *Python) Shuffle(x []int) {
	for i := len(x) - 1; i > 0; i-- {
		j := p.RandBelow(uint64(i) + 1)
		x[i], x[j] = x[j], x[i]
	}
}

// PyShuffle returns list(range(n)) after random.Random(seed).shuffle.
func PyShuffle(n int, seed *big.Int) []int {
	x := make([]int, n)
	for i := range x {
		x[i] = i
	}
	NewPython(seed).Shuffle(x)
	return x
}
