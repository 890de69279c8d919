package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Plan-level tests of hostile scripts (issue 29): each compiles a small
// script that a compiler without the check would accept.

// tokenScript is a small sequence model over data.text; tests replace TEXT
// by a file and vary the rest.
const tokenScript = `
x = data.input()
tok = nn.embedding(256, 8, name = "tok")
pos = nn.embedding(16, 8, name = "pos")
h = tok(x) + pos(data.positions())
train(
    model = nn.linear(8, 256, name = "head")(h),
    loss = "cross_entropy",
    data = data.text("TEXT", seq_len = 16, vocab = "bytes"),
    optimizer = optim.sgd(lr = 0.1),
    batch_size = 4,
)
`

// textFile writes a small text and returns its path.
func textFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(path, []byte(strings.Repeat("0123456789", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEmbeddingIdsBeyondTheTable: an embedding whose table is smaller than
// the ids it is given — byte tokens (256 ids) or data.positions() longer
// than the table — is refused, naming the layer, its line, the table and
// the ids; a table that holds them compiles.
func TestEmbeddingIdsBeyondTheTable(t *testing.T) {
	src := strings.Replace(tokenScript, "TEXT", textFile(t), 1)
	compile(t, loadSpec(t, src), 1)
	cases := []struct {
		from, to string
		want     []string
	}{
		{`nn.embedding(256, 8, name = "tok")`, `nn.embedding(10, 8, name = "tok")`,
			[]string{`/t/train.star:5:8: embedding "tok": its table has 10 rows (ids 0 … 9)`, "the token data's vocabulary has 256 ids (0 … 255)", "nn.embedding(256, 8)"}},
		{`nn.embedding(16, 8, name = "pos")`, `nn.embedding(10, 8, name = "pos")`,
			[]string{`/t/train.star:5:17: embedding "pos": its table has 10 rows (ids 0 … 9)`, "data.positions() gives ids 0 … 15 (windows of 16 tokens)", "nn.embedding(16, 8)"}},
	}
	for _, c := range cases {
		_, err := Compile(loadSpec(t, strings.Replace(src, c.from, c.to, 1)), DefaultCluster())
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to contain %q", c.to, err, want)
			}
		}
	}
	// A larger table than the ids need is PyTorch's business as usual.
	compile(t, loadSpec(t, strings.Replace(src, `nn.embedding(16, 8, name = "pos")`, `nn.embedding(20, 8, name = "pos")`, 1)), 1)
}
