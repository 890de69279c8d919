package comm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// uniqueID is a stand-in for NCCL's unique id whose bytes include the bit
// patterns a float32 path could alter: signalling and quiet NaNs, -0,
// infinities, denormals, and every byte value.
func uniqueID(salt byte) []byte {
	id := make([]byte, NCCLUniqueIDBytes)
	for i := range id {
		id[i] = byte(i*7) + salt
	}
	copy(id[0:], []byte{0x01, 0x00, 0x80, 0x7f})  // signalling NaN 0x7f800001
	copy(id[4:], []byte{0x00, 0x00, 0xc0, 0xff})  // quiet NaN, sign set
	copy(id[8:], []byte{0x00, 0x00, 0x00, 0x80})  // -0
	copy(id[12:], []byte{0x00, 0x00, 0x80, 0x7f}) // +Inf
	copy(id[16:], []byte{0x01, 0x00, 0x00, 0x00}) // the smallest denormal
	return id
}

// TestShareBytes: every rank of an in-process group gets the root's 128
// bytes, bit for bit, whichever rank is the root.
func TestShareBytes(t *testing.T) {
	for _, root := range []int{0, 2} {
		g := newGroup(t, 3, Options{Timeout: 5 * time.Second})
		want := uniqueID(byte(root))
		got := make([][]byte, 3)
		mustRun(t, g, fmt.Sprintf("root %d", root), func(c *Comm) error {
			var err error
			got[c.Rank()], err = ShareBytes(c, NCCLUniqueIDBytes, root, func() ([]byte, error) {
				if c.Rank() != root {
					return nil, fmt.Errorf("rank %d made the id, only root %d may", c.Rank(), root)
				}
				return uniqueID(byte(root)), nil
			}, Tag{Name: "NCCL unique id"})
			return err
		})
		for r, b := range got {
			if !bytes.Equal(b, want) {
				t.Errorf("root %d: rank %d got % x, want % x", root, r, b, want)
			}
		}
	}
}

// TestShareBytesRootFails: when the root cannot make the bytes, every rank
// returns at once with an error naming the root and its reason; the root
// returns its own error.
func TestShareBytesRootFails(t *testing.T) {
	g := newGroup(t, 3, Options{Timeout: 5 * time.Second})
	cause := errors.New("cuda: ncclGetUniqueId: unhandled system error (NCCL 22703 from libnccl.so.2)")
	errs := run(g, func(c *Comm) error {
		_, err := ShareBytes(c, NCCLUniqueIDBytes, 0, func() ([]byte, error) { return nil, cause }, Tag{Name: "NCCL unique id"})
		return err
	})
	if !errors.Is(errs[0], cause) {
		t.Errorf("root: %v, want %v", errs[0], cause)
	}
	for r := 1; r < 3; r++ {
		want := "comm: NCCL unique id: rank 0 could not make it: " + cause.Error()
		if errs[r] == nil || errs[r].Error() != want {
			t.Errorf("rank %d: %v, want %q", r, errs[r], want)
		}
	}
}

// TestShareBytesWrongLength: a root that makes the wrong number of bytes
// fails every rank, saying so; a long error text is cut, not lost.
func TestShareBytesWrongLength(t *testing.T) {
	g := newGroup(t, 2, Options{Timeout: 5 * time.Second})
	errs := run(g, func(c *Comm) error {
		_, err := ShareBytes(c, NCCLUniqueIDBytes, 0, func() ([]byte, error) { return make([]byte, 100), nil }, Tag{Name: "id"})
		return err
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "made 100 bytes, want 128") ||
		errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 0 could not make it: made 100 bytes, want 128") {
		t.Errorf("errors %v", errs)
	}
	long := errors.New(strings.Repeat("x", 2000))
	errs = run(g, func(c *Comm) error {
		_, err := ShareBytes(c, 8, 1, func() ([]byte, error) { return nil, long }, Tag{Name: "id"})
		return err
	})
	if errs[0] == nil || !strings.HasSuffix(errs[0].Error(), "x…") || len(errs[0].Error()) > maxShareError+100 {
		t.Errorf("rank 0: %v", errs[0])
	}
	g1 := newGroup(t, 1, Options{})
	if _, err := ShareBytes(g1.Rank(0), 0, 0, nil, Tag{Name: "id"}); err == nil {
		t.Error("0 bytes: no error")
	}
	if _, err := ShareBytes(g1.Rank(0), 4, 1, nil, Tag{Name: "id"}); err == nil || !strings.Contains(err.Error(), "root 1 out of range") {
		t.Errorf("root 1 of 1: %v", err)
	}
}

// TestGatherBytes: every rank gets every rank's card, in rank order, and
// cards round-trip their fields.
func TestGatherBytes(t *testing.T) {
	g := newGroup(t, 3, Options{Timeout: 5 * time.Second})
	got := make([][][]byte, 3)
	mustRun(t, g, "gather", func(c *Comm) error {
		card, err := EncodeCard(61, fmt.Sprintf("host%d", c.Rank()), "GPU-1234", fmt.Sprint(c.Rank()*10))
		if err != nil {
			return err
		}
		got[c.Rank()], err = GatherBytes(c, card, Tag{Name: "cards"})
		return err
	})
	for r := range got {
		for k, card := range got[r] {
			f, err := DecodeCard(card, 3)
			if err != nil || f[0] != fmt.Sprintf("host%d", k) || f[1] != "GPU-1234" || f[2] != fmt.Sprint(k*10) {
				t.Errorf("rank %d's card %d: %q %v", r, k, f, err)
			}
		}
	}
	if _, err := EncodeCard(8, "host", "long"); !errors.Is(err, ErrCardTooLong) {
		t.Errorf("EncodeCard of 10 bytes into 8: %v", err)
	}
	if _, err := EncodeCard(8, "a\x00b"); err == nil {
		t.Error("EncodeCard of a zero byte: no error")
	}
	if f, err := DecodeCard(make([]byte, 4), 4); err != nil || len(f) != 4 || f[3] != "" {
		t.Errorf("DecodeCard of 4 zero bytes: %q %v, want 4 empty fields", f, err)
	}
	if _, err := DecodeCard(make([]byte, 4), 5); err == nil {
		t.Error("DecodeCard of 5 fields from 4 zero bytes: no error")
	}
	if _, err := DecodeCard([]byte("abcd"), 1); err == nil {
		t.Error("DecodeCard without a zero byte: no error")
	}
}
