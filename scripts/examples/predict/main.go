// Command predict embeds a model gorun trained in a small Go program: it
// loads a run folder with package gorun/model and classifies MNIST test
// digits, several goroutines at once (the Model joins their requests into
// batches).
//
// Train the MNIST Net of scripts/examples/mnist.star into a run folder,
// then run this program on it:
//
//	go run ./cmd/gorun scripts/examples/mnist.star --set epochs=1 --out runs/mnist
//	go run ./scripts/examples/predict runs/mnist
package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"gorgonia.org/tensor"

	"gorun/datasets"
	"gorun/model"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/examples/predict RUN_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "predict:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	m, err := model.Load(dir)
	if err != nil {
		return err
	}
	defer m.Close()

	// The first test digits, normalised as the training set was: the
	// values the model's first layer takes (MNIST's normalisation has
	// one mean and one std). Raw uint8 pixels may be passed as they are:
	// Predict normalises them the same way; and m.FromImage(file) makes a
	// PNG or JPEG of a digit the model's input.
	mean, std := m.Normalization()
	test, err := datasets.MNIST("test", "", mean[0], std[0])
	if err != nil {
		return err
	}
	const n = 8
	x := make([]float32, n*28*28)
	labels := make([]int32, n)
	test.Fill([]int{0, 1, 2, 3, 4, 5, 6, 7}, x, labels)

	// One goroutine per digit, as the handlers of a server would call it.
	ctx := context.Background()
	lines := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			digit := tensor.New(tensor.WithShape(1, 28, 28), tensor.WithBacking(x[i*784:(i+1)*784]))
			out, err := m.Predict(ctx, digit) // one sample in, [10] log-probabilities out
			if err != nil {
				errs[i] = err
				return
			}
			probs, err := m.Probabilities(out)
			if err != nil {
				errs[i] = err
				return
			}
			p := probs.Data().([]float32)
			best := 0
			for c := range p {
				if p[c] > p[best] {
					best = c
				}
			}
			lines[i] = fmt.Sprintf("digit %d: label %d, predicted %d (p = %.3f)", i, labels[i], best, p[best])
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			return errs[i]
		}
		fmt.Println(lines[i])
	}
	st := m.Stats()
	fmt.Printf("%d requests in %d batches\n", st.Requests, st.Batches)
	return nil
}
