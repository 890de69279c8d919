package comm

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Bootstrapping a transport that brings its own collectives (NCCL): before
// its first collective, its ranks must agree on a few bytes that one rank
// makes (NCCL's unique id, from ncclGetUniqueId on rank 0) and learn a few
// bytes about every other rank (which host and GPU each is on). These
// bytes travel through any Communicator — MPI's across processes, the
// in-process one in tests — as float32 words that carry their bits (a
// broadcast or a gather only copies words, it never computes with them).

// NCCLUniqueIDBytes is the size of NCCL's unique id
// (NCCL_UNIQUE_ID_BYTES): what rank 0's ncclGetUniqueId makes and every
// rank passes to ncclCommInitRank.
const NCCLUniqueIDBytes = 128

// maxShareError is how many bytes of the root's error text travel with a
// failed ShareBytes.
const maxShareError = 512

// ShareBytes gives every rank of c the n bytes that rank root makes: root
// calls produce (the others do not) and every rank returns its result.
// When produce fails, or returns other than n bytes, every rank returns an error
// naming root and the reason, instead of waiting for bytes that never
// come. Every rank must call ShareBytes with the same n, root and tag.
func ShareBytes(c Communicator, n, root int, produce func() ([]byte, error), t Tag) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("comm: ShareBytes %q: %d bytes to share, want at least 1", t.Name, n)
	}
	if root < 0 || root >= c.Size() {
		return nil, fmt.Errorf("comm: ShareBytes %q: root %d out of range [0,%d)", t.Name, root, c.Size())
	}
	// Message: a status word (0 ok, else the error text's length), then
	// max(n, maxShareError) bytes: the payload or the root's error text.
	body := max(n, maxShareError)
	msg := make([]byte, 4+body)
	var rootErr error
	if c.Rank() == root {
		b, err := produce()
		if err == nil && len(b) != n {
			err = fmt.Errorf("made %d bytes, want %d", len(b), n)
		}
		if err != nil {
			rootErr = err
			text := err.Error()
			if len(text) > body {
				text = text[:body-len("…")] + "…"
			}
			putWord(msg[0:4], uint32(len(text)))
			copy(msg[4:], text)
		} else {
			copy(msg[4:], b)
		}
	}
	words := packBytes(msg)
	if err := c.Broadcast(words, root, t); err != nil {
		return nil, err
	}
	unpackBytes(msg, words)
	if rootErr != nil {
		return nil, rootErr
	}
	if k := word(msg[0:4]); k != 0 {
		k = min(k, uint32(body))
		return nil, fmt.Errorf("comm: %s: rank %d could not make it: %s", t.Name, root, msg[4:4+k])
	}
	return msg[4 : 4+n], nil
}

// GatherBytes gives every rank every rank's mine, in rank order: card r is
// rank r's. Every rank must pass the same number of bytes (a fixed-size
// card) and the same tag.
func GatherBytes(c Communicator, mine []byte, t Tag) ([][]byte, error) {
	if len(mine) == 0 {
		return nil, fmt.Errorf("comm: GatherBytes %q: an empty card", t.Name)
	}
	size := c.Size()
	send := packBytes(mine)
	recv := make([]float32, size*len(send))
	if err := c.AllGather(send, recv, t); err != nil {
		return nil, err
	}
	cards := make([][]byte, size)
	for r := range cards {
		cards[r] = make([]byte, len(mine))
		unpackBytes(cards[r], recv[r*len(send):(r+1)*len(send)])
	}
	return cards, nil
}

// packBytes puts b into float32 words, four bytes a word (little-endian,
// the last word zero-padded), by their bits.
func packBytes(b []byte) []float32 {
	words := make([]float32, (len(b)+3)/4)
	for i := range words {
		var w [4]byte
		copy(w[:], b[4*i:])
		words[i] = math.Float32frombits(word(w[:]))
	}
	return words
}

// unpackBytes is packBytes undone: it fills b from words.
func unpackBytes(b []byte, words []float32) {
	for i, w := range words {
		var x [4]byte
		putWord(x[:], math.Float32bits(w))
		copy(b[4*i:], x[:])
	}
}

func word(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func putWord(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// ErrCardTooLong is returned by EncodeCard when the fields do not fit.
var ErrCardTooLong = errors.New("comm: card too long")

// EncodeCard writes fields into a card of size bytes, each field ended by
// a zero byte, the rest zero: GatherBytes needs cards of one size. A
// field may not hold a zero byte.
func EncodeCard(size int, fields ...string) ([]byte, error) {
	card := make([]byte, size)
	at := 0
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return nil, fmt.Errorf("comm: card field %q holds a zero byte", f)
		}
		if at+len(f)+1 > size {
			return nil, fmt.Errorf("%w: %d bytes of fields, the card has %d", ErrCardTooLong, at+len(f)+1, size)
		}
		at += copy(card[at:], f)
		at++ // the zero byte
	}
	return card, nil
}

// DecodeCard reads the n fields EncodeCard wrote into card.
func DecodeCard(card []byte, n int) ([]string, error) {
	fields := make([]string, 0, n)
	rest := card
	for range n {
		i := strings.IndexByte(string(rest), 0)
		if i < 0 {
			return nil, fmt.Errorf("comm: card holds %d fields, want %d", len(fields), n)
		}
		fields = append(fields, string(rest[:i]))
		rest = rest[i+1:]
	}
	return fields, nil
}
