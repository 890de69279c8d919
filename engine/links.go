package engine

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"gorun/engine/target"
)

// LinkClass is which kind of link a collective crosses, the class of a
// cluster file's [[link]] table.
type LinkClass string

// The link classes, from the fastest to the slowest as a rule.
const (
	// LinkInProc joins the devices of one process (comm's in-process
	// transport, shared memory).
	LinkInProc LinkClass = "inproc"
	// LinkProcess joins processes of one host (MPI through the host's
	// shared memory or loopback).
	LinkProcess LinkClass = "process"
	// LinkHost joins processes on different hosts (MPI over the network).
	LinkHost LinkClass = "host"
)

// LinkClasses are the classes a [[link]] table may name, in order.
var LinkClasses = []LinkClass{LinkInProc, LinkProcess, LinkHost}

// Link is one [[link]] table of a cluster file: the alpha–beta figures of
// one link class, which `gorun plan --predict` uses to time collectives.
// `gorun launch --probe-links` measures them and writes such tables.
type Link struct {
	Class LinkClass
	// Bandwidth is the link's rate in bytes per second (β), > 0.
	Bandwidth float64
	// Latency is the time of one message of no bytes (α), ≥ 0.
	Latency time.Duration
	// BySize, when set, are the link's rates for messages of given sizes
	// (the [[link]] table's by_size), in increasing size: where a
	// transport's rate depends on the message (TCP's window over a
	// queue that also holds the other direction's data), BandwidthAt
	// interpolates them; nil: Bandwidth for every size.
	BySize []SizeRate
	// OneWay, when > 0, is the rate of a message that crosses the link
	// while nothing flows the other way (the [[link]] table's one_way):
	// a tree's or a chain's hop, or a fold into a power of two, against
	// Bandwidth's exchange (both ways at once, as a ring's step loads a
	// link, where each direction's acknowledgements wait behind the other
	// direction's data). 0: Bandwidth. By_size entries may give their
	// own (SizeRate.OneWay).
	OneWay float64
	// Burst is how many bytes the link passes at once after it has been
	// idle (the [[link]] table's burst: a token bucket's depth, as tc's
	// tbf or a cloud's rate limit keeps), refilled at its one-way rate
	// while idle; 0: none.
	Burst int64
}

// SizeRate is a link's rate for messages of Size bytes.
type SizeRate struct {
	Size      int64
	Bandwidth float64 // bytes per second, both ways at once
	OneWay    float64 // bytes per second one way; 0: not given
}

// BandwidthAt is the link's rate for a message of n bytes: Bandwidth
// without BySize; else BySize's rates, interpolated linearly in log(size)
// between its sizes and held at its first and last outside them.
func (l Link) BandwidthAt(n float64) float64 {
	return interpolate(l.BySize, n, l.Bandwidth, func(r SizeRate) float64 { return r.Bandwidth })
}

// OneWayAt is the link's rate for a message of n bytes that crosses it
// while nothing flows back: by_size's one_way rates where its entries
// give them (interpolated as BandwidthAt's), else OneWay, else
// BandwidthAt(n).
func (l Link) OneWayAt(n float64) float64 {
	if len(l.BySize) > 0 && l.BySize[0].OneWay > 0 {
		return interpolate(l.BySize, n, l.OneWay, func(r SizeRate) float64 { return r.OneWay })
	}
	if l.OneWay > 0 {
		return l.OneWay
	}
	return l.BandwidthAt(n)
}

// interpolate reads rate of bs at n bytes: linear in log(size) between
// their sizes, held at the first and last outside them; def without bs.
func interpolate(bs []SizeRate, n, def float64, rate func(SizeRate) float64) float64 {
	switch {
	case len(bs) == 0:
		return def
	case n <= float64(bs[0].Size):
		return rate(bs[0])
	case n >= float64(bs[len(bs)-1].Size):
		return rate(bs[len(bs)-1])
	}
	for i := 1; i < len(bs); i++ {
		if n <= float64(bs[i].Size) {
			a, b := math.Log(float64(bs[i-1].Size)), math.Log(float64(bs[i].Size))
			f := (math.Log(n) - a) / (b - a)
			return rate(bs[i-1]) + f*(rate(bs[i])-rate(bs[i-1]))
		}
	}
	return rate(bs[len(bs)-1])
}

// String writes the link as a [[link]] table's one line:
// `class = "host", bandwidth = "1Gbit/s", latency = "50µs"`.
func (l Link) String() string {
	s := fmt.Sprintf("class = %q, bandwidth = %q, latency = %q", l.Class, FormatBandwidth(l.Bandwidth), l.Latency.String())
	if l.OneWay > 0 {
		s += fmt.Sprintf(", one_way = %q", FormatBandwidth(l.OneWay))
	}
	if l.Burst > 0 {
		s += fmt.Sprintf(", burst = %q", FormatSize(l.Burst))
	}
	if len(l.BySize) > 0 {
		var parts []string
		for _, r := range l.BySize {
			if r.OneWay > 0 {
				parts = append(parts, fmt.Sprintf("{ size = %q, bandwidth = %q, one_way = %q }", FormatSize(r.Size), FormatBandwidth(r.Bandwidth), FormatBandwidth(r.OneWay)))
				continue
			}
			parts = append(parts, fmt.Sprintf("{ size = %q, bandwidth = %q }", FormatSize(r.Size), FormatBandwidth(r.Bandwidth)))
		}
		s += ", by_size = [" + strings.Join(parts, ", ") + "]"
	}
	return s
}

// FormatSize writes bytes as a size byteSize reads back: "256KiB", "4MiB",
// "100B".
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// linkKeys are the keys of a [[link]] table (by_size's entries' keys
// under it).
var linkKeys = []string{"class", "bandwidth", "latency", "one_way", "burst", "by_size", "by_size.size", "by_size.bandwidth", "by_size.one_way"}

// linkTable decodes a [[link]] table, marking its known keys decoded.
type linkTable struct {
	Class     rawValue `toml:"class"`
	Bandwidth rawValue `toml:"bandwidth"`
	Latency   rawValue `toml:"latency"`
	OneWay    rawValue `toml:"one_way"`
	Burst     rawValue `toml:"burst"`
	BySize    []struct {
		Size      rawValue `toml:"size"`
		Bandwidth rawValue `toml:"bandwidth"`
		OneWay    rawValue `toml:"one_way"`
	} `toml:"by_size"`
}

// linkError is what is wrong with the value of the link key: in which
// entry (1-based; 0: the value as a whole) and which of its keys.
type linkError struct {
	entry int
	sub   string
	msg   string
}

// key names the entry's key in full: "link[2].bandwidth", "link[1]", "link".
func (e *linkError) key() string {
	switch {
	case e.entry == 0:
		return "link"
	case e.sub == "":
		return fmt.Sprintf("link[%d]", e.entry)
	}
	return fmt.Sprintf("link[%d].%s", e.entry, e.sub)
}

// line finds the line of e in a file: its key's line within the
// entry-th [[link]] table, else that table's header, else the link key's.
func (e *linkError) line(kl keyLines) int {
	hdrs := kl["link"]
	k := e.entry
	if k < 1 || k > len(hdrs) {
		return kl.line("link")
	}
	start, end := hdrs[k-1], math.MaxInt
	if k < len(hdrs) {
		end = hdrs[k]
	}
	for _, l := range kl["link."+e.sub] {
		if l > start && l < end {
			return l
		}
	}
	return start
}

// Link returns the cluster file's link of class, and whether it has one.
func (c *Cluster) Link(class LinkClass) (Link, bool) {
	for _, l := range c.Links {
		if l.Class == class {
			return l, true
		}
	}
	return Link{}, false
}

// links reads the value of the link key: [[link]] tables, each with a
// class (one of LinkClasses, each at most once), a bandwidth (a string
// with its unit, ParseBandwidth) and optionally a latency (a Go
// duration, default 0). Errors name the entry as "link[2].bandwidth".
func links(v any) ([]Link, *linkError) {
	entries, bad := tables(v, "link", "{class = ..., bandwidth = ...}", "a link class")
	if bad != "" {
		return nil, &linkError{msg: bad}
	}
	var out []Link
	for i, e := range entries {
		fail := func(sub, format string, args ...any) ([]Link, *linkError) {
			return nil, &linkError{entry: i + 1, sub: sub, msg: fmt.Sprintf(format, args...)}
		}
		var l Link
		cv, ok := e["class"]
		if !ok {
			return fail("", "class is missing: want one of %s", linkClassList())
		}
		s, ok := cv.(string)
		if !ok {
			return fail("class", "want one of %s, found %s", linkClassList(), target.Found(cv))
		}
		l.Class = LinkClass(s)
		if !validLinkClass(l.Class) {
			return fail("class", "want one of %s, got %q", linkClassList(), s)
		}
		for j, prev := range out {
			if prev.Class == l.Class {
				return fail("class", "class %q is already given by link[%d]: one [[link]] table a class", s, j+1)
			}
		}
		bv, ok := e["bandwidth"]
		if !ok {
			return fail("", "bandwidth is missing: want a rate with its unit, such as \"1Gbit/s\" or \"12.5GB/s\"")
		}
		bw, msg := rateValue(bv)
		if msg != "" {
			return fail("bandwidth", "%s", msg)
		}
		l.Bandwidth = bw
		if lv, ok := e["latency"]; ok {
			ls, ok := lv.(string)
			if !ok {
				return fail("latency", "want a duration as a string, such as \"20us\", found %s", target.Found(lv))
			}
			d, err := time.ParseDuration(strings.TrimSpace(ls))
			if err != nil {
				return fail("latency", "%q is not a duration: want a number with a unit, such as \"20us\", \"1.5ms\"", ls)
			}
			if d < 0 {
				return fail("latency", "must be ≥ 0, got %v", d)
			}
			l.Latency = d
		}
		if ov, ok := e["one_way"]; ok {
			ow, msg := rateValue(ov)
			if msg != "" {
				return fail("one_way", "%s", msg)
			}
			l.OneWay = ow
		}
		if bv, ok := e["burst"]; ok {
			n, msg := byteSize(bv)
			if msg != "" {
				return fail("burst", "%s", msg)
			}
			l.Burst = n
		}
		if bv, ok := e["by_size"]; ok {
			rates, sub, msg := bySize(bv)
			if msg != "" {
				return fail("by_size"+sub, "%s", msg)
			}
			l.BySize = rates
		}
		out = append(out, l)
	}
	return out, nil
}

func validLinkClass(c LinkClass) bool {
	for _, k := range LinkClasses {
		if k == c {
			return true
		}
	}
	return false
}

func linkClassList() string {
	var s []string
	for _, k := range LinkClasses {
		s = append(s, strconv.Quote(string(k)))
	}
	return strings.Join(s, ", ")
}

// bandwidthUnits are the units ParseBandwidth reads, in bytes per second
// for one of them. Bits are lower-case b, bytes upper-case B; k, M, G, T
// are powers of 1000, Ki, Mi, Gi, Ti powers of 1024 (as tc and ethtool
// write rates).
var bandwidthUnits = map[string]float64{
	"bit/s": 1.0 / 8, "kbit/s": 1e3 / 8, "Mbit/s": 1e6 / 8, "Gbit/s": 1e9 / 8, "Tbit/s": 1e12 / 8,
	"B/s": 1, "kB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
	"KiB/s": 1 << 10, "MiB/s": 1 << 20, "GiB/s": 1 << 30, "TiB/s": 1 << 40,
}

// ParseBandwidth reads a rate with its unit, "1Gbit/s", "200 Mbit/s",
// "12.5GB/s", "900MiB/s", into bytes per second. The number must be
// finite and > 0; the unit is required (bits and bytes differ eightfold,
// so neither is assumed).
func ParseBandwidth(s string) (float64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == 'e' && i > 0 || t[i] == '+' || t[i] == '-') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	if num == "" {
		return 0, fmt.Errorf("%q is not a rate: want a number and a unit, such as \"1Gbit/s\" or \"12.5GB/s\"", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: %q is not a number", s, num)
	}
	mul, ok := bandwidthUnits[unit]
	if !ok {
		if unit == "" {
			return 0, fmt.Errorf("%q has no unit: write bits (\"Gbit/s\", \"Mbit/s\") or bytes (\"GB/s\", \"MiB/s\") per second", s)
		}
		return 0, fmt.Errorf("%q: unknown unit %q, want one of bit/s, kbit/s, Mbit/s, Gbit/s, Tbit/s, B/s, kB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s", s, unit)
	}
	bw := f * mul
	if !(bw > 0) || math.IsInf(bw, 0) {
		return 0, fmt.Errorf("%q: must be a finite rate > 0", s)
	}
	return bw, nil
}

// FormatBandwidth writes bytes per second in bits per second, as
// ParseBandwidth reads them back ("1Gbit/s", "187.5Mbit/s").
func FormatBandwidth(bw float64) string {
	bits := bw * 8
	for _, u := range []struct {
		name string
		div  float64
	}{{"Tbit/s", 1e12}, {"Gbit/s", 1e9}, {"Mbit/s", 1e6}, {"kbit/s", 1e3}} {
		if bits >= u.div {
			return strconv.FormatFloat(bits/u.div, 'g', 4, 64) + u.name
		}
	}
	return strconv.FormatFloat(bits, 'g', 4, 64) + "bit/s"
}

// rateValue reads a rate key's value: a string with its unit
// (ParseBandwidth). It returns the rate, or what is wrong with it.
func rateValue(v any) (float64, string) {
	s, ok := v.(string)
	if !ok {
		return 0, "want a rate with its unit as a string, such as \"1Gbit/s\", found " + target.Found(v)
	}
	bw, err := ParseBandwidth(s)
	if err != nil {
		return 0, err.Error()
	}
	return bw, ""
}

// bySize reads a [[link]] table's by_size: an array of { size = "1MiB",
// bandwidth = "300Mbit/s" } in increasing size. It returns what is wrong
// and where ("[2].size"), or the rates.
func bySize(v any) ([]SizeRate, string, string) {
	var entries []map[string]any
	switch arr := v.(type) {
	case []map[string]any:
		entries = arr
	case []any:
		for _, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, "", "want an array of { size = \"1MiB\", bandwidth = \"300Mbit/s\" }, found an array holding " + target.Found(e)
			}
			entries = append(entries, m)
		}
	default:
		return nil, "", "want an array of { size = \"1MiB\", bandwidth = \"300Mbit/s\" }, found " + target.Found(v)
	}
	var out []SizeRate
	for i, e := range entries {
		at := fmt.Sprintf("[%d]", i+1)
		sv, ok := e["size"]
		if !ok {
			return nil, at, "size is missing"
		}
		n, msg := byteSize(sv)
		if msg != "" {
			return nil, at + ".size", msg
		}
		bv, ok := e["bandwidth"]
		if !ok {
			return nil, at, "bandwidth is missing"
		}
		bw, msg := rateValue(bv)
		if msg != "" {
			return nil, at + ".bandwidth", msg
		}
		var ow float64
		if ov, ok := e["one_way"]; ok {
			if ow, msg = rateValue(ov); msg != "" {
				return nil, at + ".one_way", msg
			}
		}
		for k := range e {
			if k != "size" && k != "bandwidth" && k != "one_way" {
				return nil, at + "." + k, "unknown key: a by_size entry holds size, bandwidth and one_way"
			}
		}
		if len(out) > 0 && n <= out[len(out)-1].Size {
			return nil, at + ".size", fmt.Sprintf("sizes must increase: %s after %s", FormatSize(n), FormatSize(out[len(out)-1].Size))
		}
		if len(out) > 0 && (ow > 0) != (out[0].OneWay > 0) {
			return nil, at + ".one_way", "give one_way in every by_size entry or in none"
		}
		out = append(out, SizeRate{n, bw, ow})
	}
	return out, "", ""
}

// parseLinks decodes the link key of a cluster file (see links); decoding
// into []linkTable marks the known keys decoded, so that only a table's
// unknown keys are reported as such.
func parseLinks(md toml.MetaData, p toml.Primitive) ([]Link, *linkError) {
	var v any
	if err := md.PrimitiveDecode(p, &v); err != nil {
		return nil, &linkError{msg: err.Error()}
	}
	ls, le := links(v)
	if le == nil || le.entry > 0 {
		var lt []linkTable
		md.PrimitiveDecode(p, &lt)
	}
	return ls, le
}
