//go:build mpi

package comm

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMPIShareID runs TestMPIShareIDRank on 3 processes under mpirun:
// NCCL's unique-id exchange through the MPI transport.
func TestMPIShareID(t *testing.T) {
	if underMPIRun() {
		t.Skip("the launcher; TestMPIShareIDRank is the rank")
	}
	out, err := mpirun(t, 3, "TestMPIShareIDRank")
	if err != nil || strings.Count(out, "--- PASS: TestMPIShareIDRank") != 3 {
		t.Fatalf("mpirun -np 3: %v\n%s", err, out)
	}
}

// TestMPIShareIDRank is one rank of TestMPIShareID: rank 0 makes a
// 128-byte id (ncclGetUniqueId's size) and every rank must get it bit for
// bit; then a root that fails makes every rank fail naming it; then every
// rank learns every rank's card (host and GPU, as the NCCL set-up
// exchanges them).
func TestMPIShareIDRank(t *testing.T) {
	if !underMPIRun() {
		t.Skip("runs under mpirun, started by TestMPIShareID")
	}
	c := initMPI(t)
	c.SetTimeout(20 * time.Second)
	id, err := ShareBytes(c, NCCLUniqueIDBytes, 0, func() ([]byte, error) {
		if c.Rank() != 0 {
			return nil, fmt.Errorf("rank %d made the id", c.Rank())
		}
		return uniqueID(42), nil
	}, Tag{Name: "NCCL unique id"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(id, uniqueID(42)) {
		t.Fatalf("rank %d got % x\nwant % x", c.Rank(), id, uniqueID(42))
	}
	_, err = ShareBytes(c, NCCLUniqueIDBytes, 1, func() ([]byte, error) {
		return nil, fmt.Errorf("no NCCL here")
	}, Tag{Name: "NCCL unique id"})
	want := "comm: NCCL unique id: rank 1 could not make it: no NCCL here"
	if c.Rank() == 1 {
		want = "no NCCL here"
	}
	if err == nil || err.Error() != want {
		t.Fatalf("rank %d: failed root: %v, want %q", c.Rank(), err, want)
	}
	host, _ := os.Hostname()
	card, err := EncodeCard(256, host, fmt.Sprint(c.Rank()))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := GatherBytes(c, card, Tag{Name: "GPU cards"})
	if err != nil {
		t.Fatal(err)
	}
	for r, card := range cards {
		if f, err := DecodeCard(card, 2); err != nil || f[0] != host || f[1] != fmt.Sprint(r) {
			t.Errorf("rank %d: card %d is %q %v", c.Rank(), r, f, err)
		}
	}
	if err := c.Barrier(Tag{Name: "end"}); err != nil {
		t.Fatal(err)
	}
}
