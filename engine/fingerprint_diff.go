package engine

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"unicode"

	"gorun/ops"
)

// A resume refused for a changed plan says what changed in the user's
// terms: the layer (its name, kind and script line) and the attribute or
// tensor that differs, or the setting, with its value in the checkpoint
// and now — never the key's text whole (a legacy key prints every field
// of ops.Attrs).

// describeChange says how entry label of a resume key changed from was
// (the checkpoint's text) to now (this run's). n is the graph node of a
// step entry (nil for the others); legacy says the texts are written by
// LegacyStepKey.
func describeChange(label, was, now string, n *Node, legacy bool) string {
	if n != nil {
		a, okA := parseStep(was, legacy)
		b, okB := parseStep(now, legacy)
		if okA && okB {
			if d := stepChange(label, a, b, n); d != "" {
				return d
			}
		}
	} else if d := settingsChange(label, was, now); d != "" {
		return d
	}
	return fmt.Sprintf("the checkpoint was made with %s %q, this run has %q", label, clip(was), clip(now))
}

// stepParts is a step entry read back: its op, its inputs' and outputs'
// dtypes and shapes, and its attributes by field name (in order).
type stepParts struct {
	op      string
	in, out []string
	attrs   map[string]string
	names   []string
}

// stepChange describes how step a became b (node n, this run's), or "".
func stepChange(label string, a, b stepParts, n *Node) string {
	layer := layerName(n)
	if a.op != b.op {
		return fmt.Sprintf("the model changed at %s: the checkpoint's computes %s there, this one %s of %s (layers added, removed or replaced?)", label, a.op, b.op, layer)
	}
	var diffs []string
	names := append(append([]string(nil), a.names...), b.names...)
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		va, vb := attrOr(a, name), attrOr(b, name)
		if va != vb {
			diffs = append(diffs, fmt.Sprintf("%s was %s in the checkpoint, is %s now", attrName(name), va, vb))
		}
	}
	if len(diffs) > 0 {
		return fmt.Sprintf("%s: %s", layer, strings.Join(diffs, "; "))
	}
	def := ops.Lookup(n.Op)
	for _, side := range []struct {
		a, b []string
		name func(i int) string
	}{
		{a.in, b.in, func(i int) string {
			if def != nil && i < len(def.In) {
				return def.In[i].Name
			}
			return fmt.Sprintf("input %d", i+1)
		}},
		{a.out, b.out, func(i int) string {
			if def != nil && i < len(def.Out) {
				return def.Out[i].Name
			}
			return fmt.Sprintf("output %d", i+1)
		}},
	} {
		if len(side.a) != len(side.b) {
			return fmt.Sprintf("%s: %s took %d tensors in the checkpoint, %d now", layer, label, len(side.a), len(side.b))
		}
		for i := range side.a {
			if was, now := side.a[i], side.b[i]; was != now {
				// The shapes alone, when the dtypes agree.
				for _, dt := range []string{"f32[", "i32["} {
					if strings.HasPrefix(was, dt) && strings.HasPrefix(now, dt) {
						was, now = was[3:], now[3:]
					}
				}
				return fmt.Sprintf("%s: its %s was %s in the checkpoint, is %s now", layer, side.name(i), was, now)
			}
		}
	}
	return ""
}

// attrOr is step s's attribute name, or the zero value its ops.Attrs field
// has (what a key by meaning leaves out).
func attrOr(s stepParts, name string) string {
	if v, ok := s.attrs[name]; ok {
		return v
	}
	if f, ok := reflect.TypeOf(ops.Attrs{}).FieldByName(name); ok {
		return attrValue(reflect.Zero(f.Type))
	}
	return "unset"
}

// attrNames are the attributes whose script name is not their field's in
// snake case.
var attrNames = map[string]string{
	"P": "p", "BNMomentum": "momentum", "HasIgnore": "ignore_index set", "Perm": "the dimensions' order",
	"MaxNorm": "clip_grad_norm", "ReLU": "a fused relu", "LR": "lr",
}

// attrName is how a message names an ops.Attrs field: the script's
// argument ("stride", "negative_slope").
func attrName(field string) string {
	if n, ok := attrNames[field]; ok {
		return n
	}
	var b strings.Builder
	rs := []rune(field)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// layerPattern reads a layer's label: its kind and its name.
var layerPattern = regexp.MustCompile(`^([\w.]+) "(.*)"$`)

// layerName names the layer node n computes, with its script position:
// `layer conv1 (conv2d, train.star:3:14)`.
func layerName(n *Node) string {
	pos := ""
	if n.Pos != "" {
		pos = string(n.Pos)
	}
	if m := layerPattern.FindStringSubmatch(n.Layer); m != nil {
		if m[1] == "loss" {
			return fmt.Sprintf("the loss %s%s", m[2], paren(pos))
		}
		if pos != "" {
			return fmt.Sprintf("layer %s (%s, %s)", m[2], m[1], pos)
		}
		return fmt.Sprintf("layer %s (%s)", m[2], m[1])
	}
	return n.Layer + paren(pos)
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// parseStep reads a step entry written by StepKey, or by LegacyStepKey
// when legacy:
//
//	conv2d f32[4 1 28 28] f32[8 1 5 5] - → f32[4 8 24 24] {Stride:1 Groups:1}
//	conv2d conv2d "conv1" [[4 1 28 28] [8 1 5 5] -] → [[4 8 24 24]] {Stride:1 Padding:0 …}
func parseStep(text string, legacy bool) (stepParts, bool) {
	var s stepParts
	i := strings.LastIndex(text, " {")
	if i < 0 || !strings.HasSuffix(text, "}") {
		return s, false
	}
	head, attrs := text[:i], text[i+2:len(text)-1]
	left, right, ok := strings.Cut(head, " → ")
	if !ok {
		return s, false
	}
	s.attrs = map[string]string{}
	for _, kv := range splitTop(attrs) {
		name, v, ok := strings.Cut(kv, ":")
		if !ok {
			return s, false
		}
		s.attrs[name] = v
		s.names = append(s.names, name)
	}
	if !legacy {
		words := splitTop(left)
		if len(words) == 0 {
			return s, false
		}
		s.op, s.in, s.out = words[0], keyValues(words[1:]), keyValues(splitTop(right))
		return s, true
	}
	// Legacy: the op, the layer's label, then the inputs' shapes as one
	// bracketed list.
	if !strings.HasSuffix(left, "]") || !strings.HasPrefix(right, "[") || !strings.HasSuffix(right, "]") {
		return s, false
	}
	depth, open := 0, -1
	for j := len(left) - 1; j >= 0 && open < 0; j-- {
		switch left[j] {
		case ']':
			depth++
		case '[':
			if depth--; depth == 0 {
				open = j
			}
		}
	}
	if open < 0 {
		return s, false
	}
	s.op, _, _ = strings.Cut(left, " ")
	s.in = splitTop(left[open+1 : len(left)-1])
	s.out = splitTop(right[1 : len(right)-1])
	return s, true
}

// keyValues is a key by meaning's values, "()" meaning none.
func keyValues(ws []string) []string {
	if len(ws) == 1 && ws[0] == "()" {
		return nil
	}
	return ws
}

// settingsChange describes how a settings entry ("optimizer", "train
// settings", "data", …) changed, as the names of the values that differ
// ("optimizer: lr was 0.01 in the checkpoint, is 0.02 now"), or "" when
// the two texts do not line up word for word.
func settingsChange(label, was, now string) string {
	a, b := splitTop(was), splitTop(now)
	for i := range a {
		a[i] = strings.TrimSuffix(a[i], ",")
	}
	for i := range b {
		b[i] = strings.TrimSuffix(b[i], ",")
	}
	if len(a) == 1 && len(b) == 1 || len(a) > 0 && len(b) > 0 && a[0] != b[0] {
		// A value, or another kind (sgd, adam; mnist, text): say it whole.
		return fmt.Sprintf("%s was %s in the checkpoint, is %s now", label, clip(was), clip(now))
	}
	if len(a) != len(b) {
		return ""
	}
	var diffs []string
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		if i == 0 || a[i-1] != b[i-1] || !isName(a[i-1]) {
			return ""
		}
		diffs = append(diffs, fmt.Sprintf("%s was %s in the checkpoint, is %s now", a[i-1], clip(a[i]), clip(b[i])))
	}
	if len(diffs) == 0 {
		return ""
	}
	return label + ": " + strings.Join(diffs, "; ")
}

// isName reports a setting's name in a key's text ("lr", "batch_size").
func isName(w string) bool {
	for _, r := range w {
		if !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return false
		}
	}
	return w != "" && unicode.IsLetter([]rune(w)[0])
}

// splitTop splits s at spaces outside brackets and quotes.
func splitTop(s string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '[' || c == '{' || c == '(':
			depth++
		case c == ']' || c == '}' || c == ')':
			depth--
		case c == ' ' && depth == 0:
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// firstWord is the first word of an entry's text (a step's op).
func firstWord(text string) string {
	w, _, _ := strings.Cut(text, " ")
	return w
}

// clip shortens a text for a message.
func clip(s string) string {
	const most = 120
	if r := []rune(s); len(r) > most {
		return string(r[:most]) + "…"
	}
	return s
}
