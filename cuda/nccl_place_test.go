package cuda

import (
	"strings"
	"testing"
)

func h200(rank, proc, hostRank int, host string, gpu int, uuid string) gpuCard {
	return gpuCard{Rank: rank, Process: proc, HostRank: hostRank, Host: host, GPU: gpu, Visible: 1, UUID: uuid, Name: "NVIDIA H200"}
}

// TestGPUCardRoundTrip: a card reads back as written, through the fixed
// size comm.GatherBytes needs; a long load error is cut, not refused.
func TestGPUCardRoundTrip(t *testing.T) {
	c := h200(3, 1, 1, "gpu-node-2", 1, "GPU-5d1c0a8e-0000-1111-2222-333344445555")
	c.Visible, c.NCCL, c.NCCLVersion = 8, "cuda: cannot load NCCL: tried libnccl.so.2 (libnccl.so.2: cannot open shared object file)", 22703
	b, err := c.encode()
	if err != nil || len(b) != gpuCardBytes {
		t.Fatalf("encode: %d bytes, %v", len(b), err)
	}
	got, err := decodeGPUCard(b)
	if err != nil || got != c {
		t.Fatalf("decode: %+v %v\nwant %+v", got, err, c)
	}
	c.NCCL = strings.Repeat("e", 5000)
	b, err = c.encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeGPUCard(b); err != nil || !strings.HasSuffix(got.NCCL, "e…") {
		t.Errorf("long NCCL error: %q… %v", got.NCCL[:20], err)
	}
	if _, err := decodeGPUCard(make([]byte, gpuCardBytes)); err == nil || !strings.Contains(err.Error(), "want a number") {
		t.Errorf("empty card: %v", err)
	}
}

// TestCheckWorld: one GPU per rank passes; two ranks on one GPU (across
// processes of a host, or two devices of one process), a host without
// NCCL and a rank out of place fail, naming ranks, hosts and GPUs.
func TestCheckWorld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cards   []gpuCard
		devices int
		want    []string // substrings of the error; nil: no error
	}{
		{"one rank", []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0")}, 1, nil},
		{"two hosts one GPU each", []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0"), h200(1, 1, 0, "b", 0, "GPU-b0")}, 1, nil},
		{"two processes on one GPU", []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0"), h200(1, 1, 1, "a", 0, "GPU-a0")}, 1, []string{
			`transport "nccl": rank 0 (process 0, local rank 0 on host a, GPU 0: NVIDIA H200 GPU-a0) and rank 1 (process 1, local rank 1 on host a, GPU 0: NVIDIA H200 GPU-a0) are on the same GPU`,
			"start at most 1 processes on host a", `or use transport "mpi"`}},
		{"two devices of a process on one GPU", []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0"), h200(1, 0, 0, "a", 0, "GPU-a0")}, 2, []string{
			"rank 0 (process 0", "rank 1 (process 0", "process 0 runs cluster.devices = 2 devices but sees 1 GPUs: set devices to at most 1"}},
		{"no UUIDs: host and ordinal", []gpuCard{h200(0, 0, 0, "a", 0, ""), h200(1, 1, 0, "b", 0, ""), h200(2, 2, 1, "b", 0, "")}, 1, []string{
			"rank 1 (process 1, local rank 0 on host b, GPU 0: NVIDIA H200) and rank 2 (process 2, local rank 1 on host b"}},
		{"a host without NCCL", func() []gpuCard {
			c := []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0"), h200(1, 1, 0, "b", 0, "GPU-b0"), h200(2, 2, 0, "c", 0, "GPU-c0")}
			c[1].NCCL, c[2].NCCL = "cuda: cannot load NCCL: tried libnccl.so.2 (not found)", "x"
			return c
		}(), 1, []string{`transport "nccl": rank 1 (process 1, local rank 0 on host b, GPU 0: NVIDIA H200 GPU-b0) has no NCCL (and 1 more ranks: rank 2 (process 2`,
			": cuda: cannot load NCCL: tried libnccl.so.2 (not found)"}},
		{"ranks out of order", []gpuCard{h200(1, 0, 0, "a", 0, "GPU-a0")}, 1, []string{"card 0 says rank 1"}},
		{"two NCCL versions", func() []gpuCard {
			c := []gpuCard{h200(0, 0, 0, "a", 0, "GPU-a0"), h200(1, 1, 0, "b", 0, "GPU-b0")}
			c[0].NCCLVersion, c[1].NCCLVersion = 22703, 21805
			return c
		}(), 1, []string{`transport "nccl": rank 0 (process 0, local rank 0 on host a, GPU 0: NVIDIA H200 GPU-a0) has NCCL 2.27.3, but rank 1 (process 1, local rank 0 on host b, GPU 0: NVIDIA H200 GPU-b0) has NCCL 2.18.5`}},
	} {
		err := checkWorld(tc.cards, tc.devices)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n%v\ndoes not say\n%s", tc.name, err, w)
			}
		}
	}
}

// TestNCCLVersionString: ncclGetVersion's two encodings (before and from
// NCCL 2.9) read as NCCL's version numbers.
func TestNCCLVersionString(t *testing.T) {
	for code, want := range map[int]string{22703: "2.27.3", 21805: "2.18.5", 20900: "2.9.0", 2708: "2.7.8", 2406: "2.4.6", 0: "(version unknown)"} {
		if got := ncclVersionString(code); got != want {
			t.Errorf("ncclVersionString(%d) = %q, want %q", code, got, want)
		}
	}
}
