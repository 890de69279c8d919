package kernels

import (
	"bytes"
	"regexp"
	"slices"
	"testing"
)

func TestPTX(t *testing.T) {
	for _, c := range []struct {
		major  int
		target string
	}{{8, ".target sm_80"}, {9, ".target sm_90"}, {10, ".target sm_90"}, {12, ".target sm_90"}} {
		p := PTX(c.major)
		if !bytes.Contains(p, []byte(c.target)) {
			t.Errorf("PTX(%d) lacks %q", c.major, c.target)
		}
		if len(p) == 0 || p[len(p)-1] != 0 || bytes.IndexByte(p, 0) != len(p)-1 {
			t.Errorf("PTX(%d) is not one NUL-terminated string", c.major)
		}
	}
	for _, major := range []int{0, 5, 7} {
		if p := PTX(major); p != nil {
			t.Errorf("PTX(%d) = %d bytes, want nil", major, len(p))
		}
	}
}

// TestNames checks that the PTX modules define exactly the kernels of
// Names (kernels.h's, through go generate): a kernel declared but not
// built into the committed PTX, or built but not declared, fails here.
func TestNames(t *testing.T) {
	entry := regexp.MustCompile(`\.visible \.entry (gorun_\w+)\(`)
	for _, major := range []int{8, 9} {
		var got []string
		for _, m := range entry.FindAllSubmatch(PTX(major), -1) {
			got = append(got, string(m[1]))
		}
		if !slices.Equal(sorted(got), sorted(Names)) {
			t.Errorf("PTX(%d) entries %v, Names %v", major, got, Names)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
