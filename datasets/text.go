package datasets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"gorun/datasets/userfile"
)

// Tokens is a dataset of token windows for sequence models: a sample is
// SampleShape()[0] token ids, and its target the ids of the same window
// shifted by one token (the next token at every position). NumClasses is
// the vocabulary's size; Labels is nil. Fill writes the ids as float32
// and leaves y alone; FillTokens writes ids and targets.
type Tokens interface {
	Dataset
	FillTokens(idx []int, x, y []int32)
	Vocab() Vocab
}

// Vocab maps text to token ids: "bytes" (256 ids, one per byte) or
// "chars" (one id per distinct character of the text, in code point
// order).
type Vocab struct {
	Kind  string
	Chars []rune // chars: the characters, by id
	N     int    // ids: token ids without text (data.tensors), 0 … N−1
}

// Size is the number of ids.
func (v Vocab) Size() int {
	switch v.Kind {
	case "bytes":
		return 256
	case "ids":
		return v.N
	}
	return len(v.Chars)
}

// Encode turns text into ids. Characters the vocabulary lacks are an
// error naming them (a few, with how often each occurs): a model knows only
// the characters of its training text.
func (v Vocab) Encode(s string) ([]int32, error) {
	if v.Kind == "ids" {
		return nil, fmt.Errorf("the model was trained on token ids (data.tensors), which have no text to encode")
	}
	if v.Kind == "bytes" {
		out := make([]int32, len(s))
		for i := 0; i < len(s); i++ {
			out[i] = int32(s[i])
		}
		return out, nil
	}
	out := make([]int32, 0, len(s))
	var missing map[rune]int
	for _, r := range s {
		i, ok := slices.BinarySearch(v.Chars, r)
		if !ok {
			if missing == nil {
				missing = map[rune]int{}
			}
			missing[r]++
			continue
		}
		out = append(out, int32(i))
	}
	if missing != nil {
		return nil, v.outside(missing)
	}
	return out, nil
}

// maxNamed is how many characters outside a vocabulary an error names.
const maxNamed = 5

// outside is the error for characters (with their counts) that a chars
// vocabulary lacks: the most frequent first, at most maxNamed of them.
func (v Vocab) outside(missing map[rune]int) error {
	rs := make([]rune, 0, len(missing))
	total := 0
	for r, n := range missing {
		rs = append(rs, r)
		total += n
	}
	slices.SortFunc(rs, func(a, b rune) int {
		if missing[a] != missing[b] {
			return missing[b] - missing[a]
		}
		return int(a - b)
	})
	var named []string
	for _, r := range rs[:min(len(rs), maxNamed)] {
		times := "times"
		if missing[r] == 1 {
			times = "time"
		}
		named = append(named, fmt.Sprintf("%q (%d %s)", r, missing[r], times))
	}
	if len(rs) > maxNamed {
		named = append(named, fmt.Sprintf("and %d more", len(rs)-maxNamed))
	}
	what := fmt.Sprintf("%d characters", len(rs))
	if len(rs) == 1 {
		what = "1 character"
	}
	return fmt.Errorf("%s (%d in all) outside the model's vocabulary, the %d characters of its training text: %s",
		what, total, len(v.Chars), strings.Join(named, ", "))
}

// Decode turns ids into text (bytes that are not UTF-8 show as U+FFFD).
func (v Vocab) Decode(ids []int32) string {
	if v.Kind == "bytes" {
		b := make([]byte, len(ids))
		for i, id := range ids {
			b[i] = byte(id)
		}
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	var sb strings.Builder
	for _, id := range ids {
		if id >= 0 && int(id) < len(v.Chars) {
			sb.WriteRune(v.Chars[id])
		}
	}
	return sb.String()
}

// String is the vocabulary as a checkpoint's metadata records it:
// "bytes", or "chars:" and the characters.
func (v Vocab) String() string {
	switch v.Kind {
	case "bytes":
		return "bytes"
	case "ids":
		return fmt.Sprintf("ids:%d", v.N)
	}
	return "chars:" + string(v.Chars)
}

// ParseVocab reads what Vocab.String wrote.
func ParseVocab(s string) (Vocab, error) {
	switch {
	case s == "bytes":
		return Vocab{Kind: "bytes"}, nil
	case strings.HasPrefix(s, "chars:"):
		return Vocab{Kind: "chars", Chars: []rune(s[len("chars:"):])}, nil
	case strings.HasPrefix(s, "ids:"):
		var n int
		if _, err := fmt.Sscanf(s, "ids:%d", &n); err == nil {
			return Vocab{Kind: "ids", N: n}, nil
		}
	}
	return Vocab{}, fmt.Errorf("unknown vocabulary %.20q", s)
}

// ReadText reads a text file, or every regular file of a folder in name
// order (fortune's .dat index files and symbolic links skipped), joined.
func ReadText(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, fortunesHint(path))
	}
	if !st.IsDir() {
		return userfile.ReadFile(path, 0)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasSuffix(e.Name(), ".dat") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []byte
	for _, n := range names {
		b, err := userfile.ReadFile(filepath.Join(path, n), 0)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no text files in the folder", path)
	}
	return out, nil
}

func fortunesHint(path string) string {
	if strings.Contains(path, "fortunes") {
		return "; install Debian's fortunes package (apt-get install fortunes)"
	}
	return ""
}

// Text cuts text into windows of seqLen tokens, each with the next
// seqLen tokens as its target: window i starts at token i·seqLen. The
// last testFraction of the windows (at least one) are the "test" split,
// the others "train": the two never share text. The vocabulary is built
// from the whole text, so both splits share it.
func Text(name string, text []byte, seqLen int, vocab, split string, testFraction float64) (Tokens, error) {
	return textWindows(name, text, seqLen, vocab, nil, split, testFraction)
}

// ModelText is Text for a model built on other data, whose vocabulary is
// model (an eval set's, the training data's): the text is encoded with
// it, not with one of its own, and a character outside it is an error
// naming it. vocab, the dataset's own setting, must be model's kind.
func ModelText(name string, text []byte, seqLen int, vocab string, model Vocab, split string, testFraction float64) (Tokens, error) {
	return textWindows(name, text, seqLen, vocab, &model, split, testFraction)
}

func textWindows(name string, text []byte, seqLen int, vocab string, model *Vocab, split string, testFraction float64) (Tokens, error) {
	if seqLen < 1 {
		return nil, fmt.Errorf("datasets: %s: seq_len must be ≥ 1, got %d", name, seqLen)
	}
	if split != "train" && split != "test" {
		return nil, fmt.Errorf("datasets: %s: unknown split %q: want \"train\" or \"test\"", name, split)
	}
	if !(testFraction > 0 && testFraction < 1) {
		return nil, fmt.Errorf("datasets: %s: test_fraction must be in (0, 1), got %g", name, testFraction)
	}
	var v Vocab
	var ids []int32
	var runes []rune // the text, when it is encoded with the model's characters
	switch {
	case model != nil && model.Kind != vocab:
		switch model.Kind {
		case "ids":
			return nil, fmt.Errorf("datasets: %s: the model reads token ids (data.tensors), which text has none of", name)
		case "bytes", "chars":
			return nil, fmt.Errorf("datasets: %s: vocab = %q, but the model's vocabulary is its training text's %q: give vocab = %q", name, vocab, model.Kind, model.Kind)
		}
		return nil, fmt.Errorf("datasets: %s: unknown model vocabulary %q", name, model.Kind)
	case model != nil && vocab == "chars":
		if !utf8.Valid(text) {
			return nil, fmt.Errorf("datasets: %s: the text is not valid UTF-8, and the model's vocabulary is the characters of its training text", name)
		}
		// Encoded once split: only the split's characters must be the
		// model's.
		v = *model
		runes = []rune(string(text))
		ids = make([]int32, len(runes))
	case vocab == "bytes":
		v = Vocab{Kind: "bytes"}
		ids, _ = v.Encode(string(text))
	case vocab == "chars":
		if !utf8.Valid(text) {
			return nil, fmt.Errorf("datasets: %s: the text is not valid UTF-8; use vocab = \"bytes\"", name)
		}
		seen := map[rune]bool{}
		for _, r := range string(text) {
			seen[r] = true
		}
		v = Vocab{Kind: "chars"}
		for r := range seen {
			v.Chars = append(v.Chars, r)
		}
		slices.Sort(v.Chars)
		ids, _ = v.Encode(string(text))
	default:
		return nil, fmt.Errorf("datasets: %s: vocab must be \"bytes\" or \"chars\", got %q", name, vocab)
	}
	windows := (len(ids) - 1) / seqLen
	test := max(1, int(float64(windows)*testFraction+0.5))
	if windows-test < 1 {
		return nil, fmt.Errorf("datasets: %s: %d tokens make %d windows of %d: too few for a train and a test split", name, len(ids), windows, seqLen)
	}
	lo, hi := 0, windows-test
	if split == "test" {
		lo, hi = windows-test, windows
	}
	if runes != nil {
		enc, err := v.Encode(string(runes[lo*seqLen : hi*seqLen+1]))
		if err != nil {
			return nil, fmt.Errorf("datasets: %s: the %s split has %w", name, split, err)
		}
		copy(ids[lo*seqLen:], enc)
	}
	return &textSet{name: name + "/" + split, ids: ids[lo*seqLen : hi*seqLen+1], n: hi - lo, t: seqLen, vocab: v}, nil
}

// textSet is Text's dataset: windows of t tokens over ids.
type textSet struct {
	name  string
	ids   []int32
	n, t  int
	vocab Vocab
}

func (s *textSet) Name() string       { return s.name }
func (s *textSet) Len() int           { return s.n }
func (s *textSet) SampleShape() []int { return []int{s.t} }
func (s *textSet) NumClasses() int    { return s.vocab.Size() }
func (s *textSet) Labels() []int32    { return nil }
func (s *textSet) Vocab() Vocab       { return s.vocab }

func (s *textSet) Fill(idx []int, x []float32, _ []int32) {
	for i, j := range idx {
		s.check(j)
		for k, id := range s.ids[j*s.t : j*s.t+s.t] {
			x[i*s.t+k] = float32(id)
		}
	}
}

func (s *textSet) FillTokens(idx []int, x, y []int32) {
	for i, j := range idx {
		s.check(j)
		copy(x[i*s.t:(i+1)*s.t], s.ids[j*s.t:j*s.t+s.t])
		copy(y[i*s.t:(i+1)*s.t], s.ids[j*s.t+1:j*s.t+s.t+1])
	}
}

func (s *textSet) check(j int) {
	if uint(j) >= uint(s.n) {
		panic(fmt.Sprintf("datasets: %s: Fill: index %d out of range [0, %d)", s.name, j, s.n))
	}
}

// subset is the first n windows.
func (s *textSet) subset(n int) Dataset {
	c := *s
	c.n = n
	c.name = fmt.Sprintf("%s[:%d]", s.name, n)
	return &c
}
