package torchrand

import (
	"encoding/json"
	"math/big"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// pyGolden is testdata/pyrandom_golden.json, written by CPython
// (testdata/gen_pyrandom_golden.py).
type pyGolden struct {
	Shuffles []struct {
		N    int    `json:"n"`
		Seed string `json:"seed"`
		Perm []int  `json:"perm"`
	} `json:"shuffles"`
	GetRandBits []struct {
		Seed string   `json:"seed"`
		K    []int    `json:"k"`
		Bits []string `json:"bits"`
	} `json:"getrandbits"`
}

func readPyGolden(t *testing.T) pyGolden {
	t.Helper()
	b, err := os.ReadFile("testdata/pyrandom_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g pyGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Shuffles) == 0 || len(g.GetRandBits) == 0 {
		t.Fatal("golden file has no cases")
	}
	return g
}

func bigSeed(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("bad seed %q", s)
	}
	return n
}

// TestPyShuffleMatchesPython checks PyShuffle against
// random.Random(seed).shuffle(list(range(n))), seeds 0, 1, 1234, 2**40+5,
// -7 and 2**70+3 among them.
func TestPyShuffleMatchesPython(t *testing.T) {
	for _, c := range readPyGolden(t).Shuffles {
		got := PyShuffle(c.N, bigSeed(t, c.Seed))
		if c.N == 0 {
			if len(got) != 0 {
				t.Errorf("PyShuffle(0, %s) = %v, want []", c.Seed, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, c.Perm) {
			t.Errorf("PyShuffle(%d, %s) differs from Python's shuffle", c.N, c.Seed)
		}
	}
}

// TestGetRandBitsMatchesPython checks getrandbits for k below, at and
// above 32.
func TestGetRandBitsMatchesPython(t *testing.T) {
	for _, c := range readPyGolden(t).GetRandBits {
		p := NewPython(bigSeed(t, c.Seed))
		for i, k := range c.K {
			want, err := strconv.ParseUint(c.Bits[i], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.GetRandBits(k); got != want {
				t.Errorf("seed %s, draw %d: getrandbits(%d) = %d, want %d", c.Seed, i, k, got, want)
			}
		}
	}
}

func BenchmarkPyShuffle1M(b *testing.B) {
	seed := big.NewInt(1234)
	for b.Loop() {
		PyShuffle(1_000_000, seed)
	}
}
