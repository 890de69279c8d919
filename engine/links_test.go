package engine

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestClusterLinks(t *testing.T) {
	src := `[cluster]
transport = "mpi"

[[link]]
class = "host"
bandwidth = "1Gbit/s"
latency = "50us"

[[link]]
class = "process"
bandwidth = "12.5 GB/s"

[[link]]
class = "inproc"
bandwidth = "900MiB/s"
latency = "1µs"
`
	c, err := ParseCluster("c.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Link{
		{Class: LinkHost, Bandwidth: 125e6, Latency: 50 * time.Microsecond},
		{Class: LinkProcess, Bandwidth: 12.5e9},
		{Class: LinkInProc, Bandwidth: 900 << 20, Latency: time.Microsecond},
	}
	if len(c.Links) != len(want) {
		t.Fatalf("links %+v, want %+v", c.Links, want)
	}
	for i := range want {
		if !reflect.DeepEqual(c.Links[i], want[i]) {
			t.Errorf("link[%d] = %+v, want %+v", i+1, c.Links[i], want[i])
		}
	}
	if l, ok := c.Link(LinkProcess); !ok || l.Bandwidth != 12.5e9 {
		t.Errorf("Link(process) = %+v, %v", l, ok)
	}
	// A table written by Link.String parses back to the same link.
	back, err := ParseCluster("b.toml", []byte("link = [{"+want[0].String()+"}]\n"))
	if err != nil || len(back.Links) != 1 || !reflect.DeepEqual(back.Links[0], want[0]) {
		t.Errorf("%s read back as %+v, %v", want[0], back.Links, err)
	}
}

func TestClusterLinkErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit\"\n", `c.toml:3: link[1].bandwidth: "1Gbit": unknown unit "Gbit"`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1000\"\n", `c.toml:3: link[1].bandwidth: "1000" has no unit`},
		{"[[link]]\nclass = \"host\"\nbandwidth = 1e9\n", `c.toml:3: link[1].bandwidth: want a rate with its unit as a string`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"0Gbit/s\"\n", `c.toml:3: link[1].bandwidth: "0Gbit/s": must be a finite rate > 0`},
		{"[[link]]\nclass = \"node\"\nbandwidth = \"1Gbit/s\"\n", `c.toml:2: link[1].class: want one of "inproc", "process", "host", got "node"`},
		{"[[link]]\nbandwidth = \"1Gbit/s\"\n", `c.toml:1: link[1]: class is missing`},
		{"[[link]]\nclass = \"host\"\n", `c.toml:1: link[1]: bandwidth is missing`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\nlatency = \"20\"\n", `c.toml:4: link[1].latency: "20" is not a duration`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\nlatency = \"-2us\"\n", `c.toml:4: link[1].latency: must be ≥ 0`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\n[[link]]\nclass = \"host\"\nbandwidth = \"2Gbit/s\"\n",
			`c.toml:5: link[2].class: class "host" is already given by link[1]`},
		{"[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\nlatncy = \"2us\"\n", `c.toml:4: link.latncy: unknown key; did you mean "link.latency"?`},
		{"link = 3\n", `c.toml:1: link: want [[link]] tables, one a link class, found`},
	} {
		_, err := ParseCluster("c.toml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for s, want := range map[string]float64{
		"1Gbit/s": 125e6, "200Mbit/s": 25e6, "50 Mbit/s": 6.25e6, "100Gbit/s": 12.5e9,
		"12.5GB/s": 12.5e9, "1KiB/s": 1024, "8bit/s": 1,
	} {
		got, err := ParseBandwidth(s)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %g, %v; want %g", s, got, err, want)
		}
		if back, err := ParseBandwidth(FormatBandwidth(got)); err != nil || back != got {
			t.Errorf("FormatBandwidth(%g) = %q reads back as %g, %v", got, FormatBandwidth(got), back, err)
		}
	}
}

func TestClusterLinkBySize(t *testing.T) {
	src := `[[link]]
class = "host"
bandwidth = "100Mbit/s"
latency = "10us"
by_size = [{ size = "64KiB", bandwidth = "200Mbit/s" }, { size = "4MiB", bandwidth = "100Mbit/s" }]
`
	c, err := ParseCluster("c.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := c.Link(LinkHost)
	for _, tc := range []struct{ n, want float64 }{
		{1000, 25e6}, {64 << 10, 25e6}, {512 << 10, 18.75e6}, {4 << 20, 12.5e6}, {1 << 30, 12.5e6},
	} {
		if got := l.BandwidthAt(tc.n); math.Abs(got-tc.want) > 1 {
			t.Errorf("BandwidthAt(%g) = %g, want %g", tc.n, got, tc.want)
		}
	}
	if got := (Link{Bandwidth: 7}).BandwidthAt(1e9); got != 7 {
		t.Errorf("without by_size: %g, want Bandwidth", got)
	}
	back, err := ParseCluster("b.toml", []byte("link = [{"+l.String()+"}]\n"))
	if err != nil || len(back.Links) != 1 || len(back.Links[0].BySize) != 2 || back.Links[0].BySize[1] != l.BySize[1] {
		t.Errorf("%s read back as %+v, %v", l, back.Links, err)
	}
	for _, tc := range []struct{ src, want string }{
		{`by_size = [{ size = "4MiB", bandwidth = "1Gbit/s" }, { size = "1MiB", bandwidth = "1Gbit/s" }]`, `link[1].by_size[2].size: sizes must increase: 1MiB after 4MiB`},
		{`by_size = [{ size = "4MiB" }]`, `link[1].by_size[1]: bandwidth is missing`},
		{`by_size = [{ size = "4MB", bandwidth = "fast" }]`, `link[1].by_size[1].bandwidth: "fast" is not a rate`},
		{`by_size = "4MiB"`, `link[1].by_size: want an array of`},
	} {
		_, err := ParseCluster("c.toml", []byte("[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\n"+tc.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// TestClusterLinkOneWayBurst: one_way (the link's and by_size's) and
// burst read, write back and are checked.
func TestClusterLinkOneWayBurst(t *testing.T) {
	src := `[[link]]
class = "host"
bandwidth = "100Mbit/s"
one_way = "190Mbit/s"
burst = "48KiB"
by_size = [{ size = "64KiB", bandwidth = "200Mbit/s", one_way = "400Mbit/s" }, { size = "4MiB", bandwidth = "100Mbit/s", one_way = "200Mbit/s" }]
`
	c, err := ParseCluster("c.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := c.Link(LinkHost)
	if l.Burst != 48<<10 || l.OneWay != 190e6/8 {
		t.Errorf("burst %d, one_way %g; want 49152, 23.75e6", l.Burst, l.OneWay)
	}
	for _, tc := range []struct{ n, ex, ow float64 }{
		{1000, 25e6, 50e6}, {512 << 10, 18.75e6, 37.5e6}, {1 << 30, 12.5e6, 25e6},
	} {
		if got := l.BandwidthAt(tc.n); math.Abs(got-tc.ex) > 1 {
			t.Errorf("BandwidthAt(%g) = %g, want %g", tc.n, got, tc.ex)
		}
		if got := l.OneWayAt(tc.n); math.Abs(got-tc.ow) > 1 {
			t.Errorf("OneWayAt(%g) = %g, want %g", tc.n, got, tc.ow)
		}
	}
	// Without by_size's one_way: the link's; without that, both ways'.
	if got := (Link{Bandwidth: 7, OneWay: 9}).OneWayAt(1e9); got != 9 {
		t.Errorf("one_way without by_size: %g, want 9", got)
	}
	if got := (Link{Bandwidth: 7, BySize: []SizeRate{{Size: 10, Bandwidth: 5}}}).OneWayAt(1e9); got != 5 {
		t.Errorf("no one_way: %g, want the both-ways rate 5", got)
	}
	back, err := ParseCluster("b.toml", []byte("link = [{"+l.String()+"}]\n"))
	if err != nil || len(back.Links) != 1 || back.Links[0].Burst != l.Burst || back.Links[0].OneWay != l.OneWay || back.Links[0].BySize[1] != l.BySize[1] {
		t.Errorf("%s read back as %+v, %v", l, back.Links, err)
	}
	for _, tc := range []struct{ src, want string }{
		{`one_way = "fast"`, `link[1].one_way: "fast" is not a rate`},
		{`one_way = 5`, `link[1].one_way: want a rate with its unit as a string`},
		{`burst = "lots"`, `link[1].burst: "lots" is not a size`},
		{`burst = -3`, `link[1].burst: must be a positive number of bytes`},
		{`by_size = [{ size = "1MiB", bandwidth = "1Gbit/s", one_way = "2Gbit/s" }, { size = "4MiB", bandwidth = "1Gbit/s" }]`, `link[1].by_size[2].one_way: give one_way in every by_size entry or in none`},
		{`by_size = [{ size = "1MiB", bandwidth = "1Gbit/s", one_way = "2Gbit" }]`, `link[1].by_size[1].one_way: "2Gbit": unknown unit`},
		{`by_size = [{ size = "1MiB", bandwidth = "1Gbit/s", oneway = "2Gbit/s" }]`, `link[1].by_size[1].oneway: unknown key: a by_size entry holds size, bandwidth and one_way`},
	} {
		_, err := ParseCluster("c.toml", []byte("[[link]]\nclass = \"host\"\nbandwidth = \"1Gbit/s\"\n"+tc.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}
