package datasets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorun/engine/spec"
)

// TestEvalTextModelVocab: an eval text is encoded with the model's
// vocabulary (the training text's), not one of its own. Before, an eval
// text over "ca" got the ids c=1, a=0 of its own vocabulary where the
// model reads c=2 (test accuracy 0.027 on a real run), and one with
// characters the training text lacks was mapped silently; now those are
// an error naming them, most frequent first, with their counts.
func TestEvalTextModelVocab(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	train := &spec.Data{Kind: "text", File: write("train.txt", strings.Repeat("abc ", 40)), SeqLen: 4, Vocab: "chars", Split: "train", TestFraction: 0.1}
	info, err := Describe(train)
	if err != nil {
		t.Fatal(err)
	}
	if info.Vocab.String() != "chars: abc" {
		t.Fatalf("training vocabulary %q", info.Vocab.String())
	}

	// The same characters, fewer of them: the model's ids.
	sub := &spec.Data{Kind: "text", File: write("sub.txt", strings.Repeat("ca", 40)), SeqLen: 4, Vocab: "chars", Split: "test", TestFraction: 0.5}
	ev, err := Describe(sub, WithVocab(info.Vocab))
	if err != nil || ev.Classes != info.Classes {
		t.Fatalf("Describe: %+v, %v; want %d classes", ev, err, info.Classes)
	}
	ds, err := Load(sub, WithVocab(info.Vocab))
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]int32, 4), make([]int32, 4)
	ds.(Tokens).FillTokens([]int{0}, x, y)
	if want := []int32{3, 1, 3, 1}; !slices.Equal(x, want) { // c=3, a=1 in " abc"
		t.Errorf("eval ids %v, want %v (the model's)", x, want)
	}

	// Characters outside the model's vocabulary, in the test split.
	// 201 characters: 50 windows of 4, the first 25 (characters 0 to
	// 100, a target included) the train split, the others the test split.
	text := strings.Repeat("abc ", 25) + strings.Repeat("aéé zb\tx€y", 10) + "a"
	other := &spec.Data{Kind: "text", File: write("other.txt", text), SeqLen: 4, Vocab: "chars", Split: "test", TestFraction: 0.5, Pos: "t.star:3:9"}
	want := "t.star:3:9: data.text: datasets: " + other.File + ": the test split has 6 characters (70 in all) outside the model's vocabulary, the 4 characters of its training text: 'é' (20 times), '\\t' (10 times), 'x' (10 times), 'y' (10 times), 'z' (10 times), and 1 more"
	for _, f := range []func() error{
		func() error { _, err := Describe(other, WithVocab(info.Vocab)); return err },
		func() error { _, err := Load(other, WithVocab(info.Vocab)); return err },
	} {
		if err := f(); err == nil || err.Error() != want {
			t.Errorf("got  %v\nwant %s", err, want)
		}
	}
	// Only the split read counts: the train split is the model's text.
	other.Split = "train"
	if _, err := Load(other, WithVocab(info.Vocab)); err != nil {
		t.Errorf("train split: %v", err)
	}

	// Another kind of vocabulary is named.
	bytes := *sub
	bytes.Vocab = "bytes"
	if _, err := Describe(&bytes, WithVocab(info.Vocab)); err == nil || !strings.Contains(err.Error(), `vocab = "bytes", but the model's vocabulary is its training text's "chars": give vocab = "chars"`) {
		t.Errorf("bytes eval for a chars model: %v", err)
	}
}

// TestEncodeNamesCharacters: a prompt (gorun sample) with characters the
// vocabulary lacks names them all with their counts, at most five.
func TestEncodeNamesCharacters(t *testing.T) {
	v := Vocab{Kind: "chars", Chars: []rune(" abc")}
	if ids, err := v.Encode("cab a"); err != nil || !slices.Equal(ids, []int32{3, 1, 2, 0, 1}) {
		t.Errorf("Encode: %v, %v", ids, err)
	}
	_, err := v.Encode("aXbYY")
	if want := "2 characters (3 in all) outside the model's vocabulary, the 4 characters of its training text: 'Y' (2 times), 'X' (1 time)"; err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}
