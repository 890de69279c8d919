// Package torchrand reproduces PyTorch's CPU random generator (mt19937, as
// torch.Generator.manual_seed sets it up) and torch.randperm on it, so that
// samplers written for gorun produce the very index lists PyTorch's
// DistributedSampler does for the same seed and epoch; and, on the same
// mt19937, CPython's random.Random (seeding, getrandbits, shuffle), so that
// the distributed tutorial's DataPartitioner can be reproduced too. Both
// are checked against golden files written by PyTorch 1.13 and CPython 3
// (testdata/gen_*.py).
package torchrand

// MT19937 is the 32-bit Mersenne Twister, seeded as PyTorch seeds it.
type MT19937 struct {
	state [624]uint32
	next  int
}

// New returns a generator seeded like torch.Generator().manual_seed(seed).
func New(seed uint64) *MT19937 {
	m := &MT19937{}
	m.Seed(seed)
	return m
}

// Seed resets the generator (PyTorch keeps the low 32 bits of the seed).
func (m *MT19937) Seed(seed uint64) {
	m.state[0] = uint32(seed)
	for j := 1; j < 624; j++ {
		prev := m.state[j-1]
		m.state[j] = 1812433253*(prev^(prev>>30)) + uint32(j)
	}
	m.next = 624
}

func (m *MT19937) twist() {
	const upper, lower, matrixA = 0x80000000, 0x7fffffff, 0x9908b0df
	for i := 0; i < 624; i++ {
		y := (m.state[i] & upper) | (m.state[(i+1)%624] & lower)
		v := m.state[(i+397)%624] ^ (y >> 1)
		if y&1 != 0 {
			v ^= matrixA
		}
		m.state[i] = v
	}
	m.next = 0
}

// Uint32 returns the next 32-bit output.
func (m *MT19937) Uint32() uint32 {
	if m.next >= 624 {
		m.twist()
	}
	y := m.state[m.next]
	m.next++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// RandPerm returns torch.randperm(n, generator=g) for g seeded with seed.
func RandPerm(n int, seed uint64) []int {
	p := make([]int, n)
	RandPermInto(p, seed)
	return p
}

// RandPermInto fills p with torch.randperm(len(p)) for a generator seeded
// with seed: the identity, then a forward Fisher–Yates pass that draws
// random() % (n-i) for position i, as ATen's randperm_cpu does.
func RandPermInto(p []int, seed uint64) {
	n := len(p)
	for i := range p {
		p[i] = i
	}
	g := New(seed)
	for i := 0; i < n-1; i++ {
		z := int(uint64(g.Uint32()) % uint64(n-i))
		p[i], p[z+i] = p[z+i], p[i]
	}
}
