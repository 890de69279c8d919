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

## test: gofmt, go vet and every test (about a few minutes on 2 cores)
test: vet
	$(GO) test -count=1 ./...

vet:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...

## bench: every benchmark; training speed is reported next to PyTorch measured in the same run
bench:
	$(GO) test -run '^$$' -bench . -benchtime 300x ./engine/
	$(GO) test -run '^$$' -bench . ./ops/... ./comm/ ./datasets/

clean:
	rm -rf bin runs
