package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Init is a parameter's initialisation: Kind "" (PyTorch's default for
// the layer), "constant" (Value), "normal" (standard deviation Value),
// "kaiming_normal", "kaiming_uniform", "xavier_uniform" or "xavier_normal".
type Init struct {
	Kind  string
	Value float64
}

// InitNames lists what a layer's init= may say.
const InitNames = `"default", "zeros", "ones", a number, "normal(STD)", "kaiming_normal" (fan_out, relu), "kaiming_uniform" (fan_in, relu), "xavier_uniform", "xavier_normal"`

// ParseInit reads a layer's init= string; ok is false when it names no
// initialisation (see InitNames).
func ParseInit(s string) Init {
	in, _ := parseInit(s)
	return in
}

// CheckInit reports whether s is an initialisation ParseInit reads.
func CheckInit(s string) error {
	if _, ok := parseInit(s); !ok {
		return fmt.Errorf("init %q: want %s", s, InitNames)
	}
	return nil
}

func parseInit(s string) (Init, bool) {
	switch s {
	case "", "default":
		return Init{}, true
	case "zeros":
		return Init{Kind: "constant"}, true
	case "ones":
		return Init{Kind: "constant", Value: 1}, true
	case "kaiming_normal", "kaiming_uniform", "xavier_uniform", "xavier_normal":
		return Init{Kind: s}, true
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
		return Init{Kind: "constant", Value: v}, true
	}
	if strings.HasPrefix(s, "normal(") && strings.HasSuffix(s, ")") {
		if v, err := strconv.ParseFloat(s[len("normal("):len(s)-1], 64); err == nil && v > 0 && !math.IsInf(v, 0) {
			return Init{Kind: "normal", Value: v}, true
		}
	}
	return Init{}, false
}
