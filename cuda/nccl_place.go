package cuda

import (
	"fmt"
	"strconv"
	"strings"

	"gorun/comm"
)

// The plain-Go half of the NCCL world (nccl_world.go): what each rank
// tells the others before NCCL starts, and the checks on it, so that a
// world NCCL would refuse (two ranks on one GPU) or could not start (a
// host without NCCL) fails on every rank with one message naming the
// rank, its host and its GPU, instead of NCCL's own error on one rank and
// a wait on the others.

// gpuCard is what one rank of an NCCL world tells the others.
type gpuCard struct {
	// Rank is the global rank; Process the process it runs in and
	// HostRank that process's rank among the processes of its host (the
	// launcher's local rank).
	Rank, Process, HostRank int
	// Host is the host's name.
	Host string
	// GPU is the ordinal of the rank's GPU as its process sees it, of
	// Visible GPUs; UUID the GPU's UUID ("GPU-…", "" when unknown) and
	// Name its name.
	GPU, Visible int
	UUID, Name   string
	// NCCL is "" when the process loaded NCCL, else why it could not;
	// NCCLVersion is the version it loaded (ncclGetVersion: 22703 for
	// 2.27.3).
	NCCL        string
	NCCLVersion int
}

// gpuCardBytes is the size of an encoded card (comm.GatherBytes needs one
// size): room for a host name of 255 bytes and NCCL's longest load error.
const gpuCardBytes = 2048

const gpuCardFields = 10

// encode writes the card for comm.GatherBytes; a load error too long for
// the card is cut.
func (c gpuCard) encode() ([]byte, error) {
	nccl := strings.ReplaceAll(c.NCCL, "\x00", "")
	if room := gpuCardBytes - 512; len(nccl) > room {
		nccl = nccl[:room] + "…"
	}
	return comm.EncodeCard(gpuCardBytes, strconv.Itoa(c.Rank), strconv.Itoa(c.Process), strconv.Itoa(c.HostRank),
		c.Host, strconv.Itoa(c.GPU), strconv.Itoa(c.Visible), c.UUID, c.Name, nccl, strconv.Itoa(c.NCCLVersion))
}

// decodeGPUCard reads a card that encode wrote.
func decodeGPUCard(b []byte) (gpuCard, error) {
	f, err := comm.DecodeCard(b, gpuCardFields)
	if err != nil {
		return gpuCard{}, err
	}
	var c gpuCard
	ints := []*int{&c.Rank, &c.Process, &c.HostRank, nil, &c.GPU, &c.Visible, nil, nil, nil, &c.NCCLVersion}
	for i, p := range ints {
		if p == nil {
			continue
		}
		if *p, err = strconv.Atoi(f[i]); err != nil {
			return gpuCard{}, fmt.Errorf("cuda: a GPU card's field %d is %q, want a number", i, f[i])
		}
	}
	c.Host, c.UUID, c.Name, c.NCCL = f[3], f[6], f[7], f[8]
	return c, nil
}

// where names a card's rank, host and GPU: "rank 1 (process 1, local
// rank 1 on host gpu1, GPU 0: NVIDIA H200 GPU-5d1c…)".
func (c gpuCard) where() string {
	gpu := "GPU " + strconv.Itoa(c.GPU)
	if c.Name != "" || c.UUID != "" {
		gpu += ": " + strings.TrimSpace(c.Name+" "+c.UUID)
	}
	return fmt.Sprintf("rank %d (process %d, local rank %d on host %s, %s)", c.Rank, c.Process, c.HostRank, c.Host, gpu)
}

// sameGPU reports whether two cards name one physical GPU: the same UUID,
// or, when a UUID is unknown, the same host and ordinal.
func sameGPU(a, b gpuCard) bool {
	if a.UUID != "" && b.UUID != "" {
		return a.UUID == b.UUID
	}
	return a.Host == b.Host && a.GPU == b.GPU
}

// checkWorld checks the cards of every rank of an NCCL world (card r is
// rank r's) with devices GPUs per process: every rank has NCCL, and no two
// ranks share a GPU (NCCL runs one rank per GPU and refuses two).
func checkWorld(cards []gpuCard, devices int) error {
	for r, c := range cards {
		if c.Rank != r {
			return fmt.Errorf("cuda: NCCL set-up: card %d says rank %d: the processes disagree on the world (were they started from one cluster file?)", r, c.Rank)
		}
	}
	var missing []string
	for _, c := range cards {
		if c.NCCL != "" {
			missing = append(missing, c.where())
		}
	}
	if len(missing) > 0 {
		c := cards[0]
		for _, x := range cards {
			if x.NCCL != "" {
				c = x
				break
			}
		}
		more := ""
		if len(missing) > 1 {
			more = fmt.Sprintf(" (and %d more ranks: %s)", len(missing)-1, strings.Join(missing[1:], "; "))
		}
		return fmt.Errorf("transport \"nccl\": %s has no NCCL%s: %s", c.where(), more, c.NCCL)
	}
	for _, c := range cards[1:] {
		if c.NCCLVersion != cards[0].NCCLVersion {
			return fmt.Errorf("transport \"nccl\": %s has NCCL %s, but %s has NCCL %s: every rank needs the same NCCL (set [cuda] nccl to the same library on every host)",
				cards[0].where(), ncclVersionString(cards[0].NCCLVersion), c.where(), ncclVersionString(c.NCCLVersion))
		}
	}
	for j, b := range cards {
		for _, a := range cards[:j] {
			if !sameGPU(a, b) {
				continue
			}
			fix := fmt.Sprintf("process k of a host opens its GPUs from k·%d on (cluster.devices = %d), modulo the %d GPUs it sees; "+
				"start at most %d processes on host %s, or give each its own GPUs (CUDA_VISIBLE_DEVICES)",
				devices, devices, b.Visible, max(b.Visible/max(devices, 1), 1), b.Host)
			if a.Process == b.Process {
				fix = fmt.Sprintf("process %d runs cluster.devices = %d devices but sees %d GPUs: set devices to at most %d",
					b.Process, devices, b.Visible, b.Visible)
			}
			return fmt.Errorf("transport \"nccl\": %s and %s are on the same GPU, and NCCL runs one rank per GPU: %s; "+
				"or use transport \"mpi\" (or \"inproc\" in one process), whose replicas can share a GPU",
				a.where(), b.where(), fix)
		}
	}
	return nil
}

// ncclVersionString writes ncclGetVersion's code as NCCL's version:
// 22703 is "2.27.3" (NCCL 2.9 on: major·10000 + minor·100 + patch),
// 2708 "2.7.8" (before: major·1000 + minor·100 + patch).
func ncclVersionString(code int) string {
	switch {
	case code <= 0:
		return "(version unknown)"
	case code >= 20900:
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}
