package runner

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuTicks reads the machine's summed CPU time from /proc/stat's "cpu"
// line, in clock ticks: all of it, and the part a hypervisor gave to other
// guests while this one had work (steal). ok is false where the file or
// its steal column is missing (not Linux, or a kernel without it).
func cpuTicks() (total, steal int64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	// user nice system idle iowait irq softirq steal [guest guest_nice],
	// guest time already counted in user.
	for i, s := range f[1:9] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 7 {
			steal = v
		}
	}
	return total, steal, true
}

// stealMeter measures the share of the machine's CPU time that its
// hypervisor took (steal) between start and percent: the part of a
// benchmark's figures that the host, not the code, decided. A machine
// with 0 % steal is the quiet machine the speed targets assume.
type stealMeter struct {
	total, steal int64
	ok           bool
}

func (m *stealMeter) start() { m.total, m.steal, m.ok = cpuTicks() }

// percent is the steal since start, in percent of all CPU time; ok false
// when it cannot be read or no tick passed.
func (m *stealMeter) percent() (float64, bool) {
	total, steal, ok := cpuTicks()
	if !ok || !m.ok || total <= m.total {
		return 0, false
	}
	return 100 * float64(steal-m.steal) / float64(total-m.total), true
}

// reportSteal adds the steal since m started to b's metrics.
func reportSteal(b *testing.B, m *stealMeter) {
	if p, ok := m.percent(); ok {
		b.ReportMetric(p, "steal_%")
	}
}

// median is the middle value of x (the mean of the middle two for an even
// count); x is not changed.
func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	if len(y)%2 == 1 {
		return y[len(y)/2]
	}
	return (y[len(y)/2-1] + y[len(y)/2]) / 2
}

func TestCPUTicks(t *testing.T) {
	total, steal, ok := cpuTicks()
	if !ok {
		t.Skip("SKIP: /proc/stat has no steal column on this machine")
	}
	if total <= 0 || steal < 0 || steal > total {
		t.Fatalf("cpuTicks = %d total, %d steal", total, steal)
	}
	var m stealMeter
	m.start()
	for t0 := time.Now(); time.Since(t0) < 50*time.Millisecond; { // ticks pass
	}
	if p, ok := m.percent(); ok && (p < 0 || p > 100) {
		t.Fatalf("steal %v%% outside [0, 100]", p)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		x    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		x := append([]float64(nil), c.x...)
		if got := median(x); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.x, got, c.want)
		}
		for i := range x {
			if x[i] != c.x[i] {
				t.Errorf("median changed its input: %v", x)
			}
		}
	}
}
