package runner

import (
	"math"
	"strings"
	"testing"
)

// TestGenerateRefusesBadOptions: Generate itself refuses a temperature
// that is not a finite number ≥ 0 and a token count past MaxSampleTokens,
// before it builds anything (gorun sample checks its flags first).
func TestGenerateRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    SampleOptions
		want string
	}{
		{SampleOptions{Tokens: 10, Temperature: math.NaN()}, "temperature NaN: want a finite number"},
		{SampleOptions{Tokens: 10, Temperature: math.Inf(1)}, "temperature +Inf: want a finite number"},
		{SampleOptions{Tokens: 10, Temperature: -0.5}, "temperature -0.5"},
		{SampleOptions{Tokens: MaxSampleTokens + 1}, "1000001 tokens to add: want 1 to 1000000"},
		{SampleOptions{Tokens: 0}, "0 tokens to add"},
	} {
		if _, err := Generate(nil, "", []int32{1}, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
