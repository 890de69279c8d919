package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorun/model"
)

var (
	loadRequests = flag.Int("serve.load", 0, "TestLoad: send this many requests from -serve.clients clients to the MNIST Net of scripts/examples/mnist.star (trained on 2,000 digits for one epoch); 0: a short run on a tiny model")
	loadClients  = flag.Int("serve.clients", 64, "TestLoad: concurrent clients with -serve.load")
)

var mnistNetRun trainedModel

// mnistNet is the Net of scripts/examples/mnist.star trained for one
// epoch on the first 2,000 training digits.
func mnistNet(t testing.TB) *model.Model {
	t.Helper()
	src, err := os.ReadFile("../../scripts/examples/mnist.star")
	if err != nil {
		t.Fatal(err)
	}
	s, w := mnistNetRun.train(t, "mnist", string(src), nil, "data=data.mnist(split='train', limit=2000)", "eval=None", "epochs=1")
	return load(t, s, w)
}

// TestLoad sends requests of one MNIST digit each, alternately as JSON
// (normalised float32 inputs) and as a PNG image (raw pixels), from
// concurrent clients over loopback, and checks that every one is
// answered 200 with the outputs Predict gives for that digit, bit for bit:
// Predict's answer for the digit alone or in a batch of several (the CPU
// matrix multiply sums the tiniest products, those of a batch of 1, in
// another order; see package model). It reports the throughput, the
// latency's percentiles and the batches the model ran.
//
// By default a short run (640 requests, 16 clients, a tiny model);
//
//	go test ./model/serve -run TestLoad -v -serve.load 20000
//
// sends 20,000 requests from 64 clients to the MNIST Net.
func TestLoad(t *testing.T) {
	total, clients := 640, 16
	var m *model.Model
	if *loadRequests > 0 {
		total, clients = *loadRequests, *loadClients
		m = mnistNet(t)
	} else {
		m = netModel(t)
	}
	s := serve(t, m, Options{})
	const digits = 500
	x, raw := mnistTest(t, digits)
	ctx := context.Background()

	// The references: each digit alone and in batches, as floats and as
	// pixels.
	type refs struct{ alone, batched []float32 }
	var floatRef, pixelRef refs
	for _, c := range []struct {
		r  *refs
		in any
	}{{&floatRef, x}, {&pixelRef, raw}} {
		out, err := m.Predict(ctx, dense([]int{digits, 1, 28, 28}, c.in))
		if err != nil {
			t.Fatal(err)
		}
		c.r.batched = out.Data().([]float32)
		for i := range digits {
			var one any
			switch v := c.in.(type) {
			case []float32:
				one = v[i*784 : (i+1)*784]
			case []uint8:
				one = v[i*784 : (i+1)*784]
			}
			c.r.alone = append(c.r.alone, predict(t, m, dense([]int{1, 1, 28, 28}, one))...)
		}
	}
	bodies := make([][]byte, 2*digits)
	for i := range digits {
		bodies[2*i] = jsonArray(x[i*784:(i+1)*784], 784)
		bodies[2*i+1] = grayPNG(t, raw[i*784:(i+1)*784], 28, 28)
	}
	before := m.Stats()

	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, okAlone, okBatched atomic.Int64
	latencies := make([]time.Duration, total)
	failures := make(chan string, 16)
	deadline := time.Now().Add(10 * time.Minute)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total || time.Now().After(deadline) {
					return
				}
				k := i % len(bodies)
				d := k / 2
				ctype, ref := "application/json", floatRef
				if k%2 == 1 {
					ctype, ref = "image/png", pixelRef
				}
				t0 := time.Now()
				req, _ := http.NewRequest("POST", s.url+"/v1/predict", bytes.NewReader(bodies[k]))
				req.Header.Set("Content-Type", ctype)
				res, err := hc.Do(req)
				var b []byte
				if err == nil {
					b, err = io.ReadAll(res.Body)
					res.Body.Close()
				}
				latencies[i] = time.Since(t0)
				var got []float32
				if err == nil && res.StatusCode == 200 {
					got, err = firstOutputs(b)
				}
				switch {
				case err != nil:
				case got == nil:
					err = fmt.Errorf("status %d: %s", res.StatusCode, b)
				case sameBits(got, ref.alone[d*10:(d+1)*10]) < 0:
					okAlone.Add(1)
				case sameBits(got, ref.batched[d*10:(d+1)*10]) < 0:
					okBatched.Add(1)
				default:
					err = fmt.Errorf("%s digit %d: outputs %v; Predict gives %v alone, %v in a batch", ctype, d, got, ref.alone[d*10:(d+1)*10], ref.batched[d*10:(d+1)*10])
				}
				if err != nil {
					select {
					case failures <- fmt.Sprintf("request %d: %v", i, err):
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	answered := okAlone.Load() + okBatched.Load()
	if answered != int64(total) {
		t.Errorf("%d of %d requests answered with Predict's outputs", answered, total)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))] }
	st := m.Stats()
	batches, samples := st.Batches-before.Batches, st.Samples-before.Samples
	t.Logf("%d requests (half JSON, half PNG, one digit each) from %d clients in %v: %.0f requests/s; latency p50 %v, p99 %v, max %v; %d answers equal Predict's for the digit alone, %d in a batch; the model ran %d batches, %.1f samples each",
		total, clients, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(),
		pct(0.50).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), latencies[len(latencies)-1].Round(10*time.Microsecond),
		okAlone.Load(), okBatched.Load(), batches, float64(samples)/float64(max(batches, 1)))
	if r := s.do(t, "GET", "/metrics", "", nil); !bytes.Contains(r.body, fmt.Appendf(nil, `gorun_serve_requests_total{code="200",route="predict"} %d`, total)) {
		t.Errorf("/metrics does not count %d answered predictions", total)
	}
}

// firstOutputs are the "outputs" of an answer's first prediction (t.Fatal
// may not be called from the clients' goroutines).
func firstOutputs(b []byte) ([]float32, error) {
	var out struct{ Predictions []prediction }
	if err := json.Unmarshal(b, &out); err != nil || len(out.Predictions) == 0 {
		return nil, fmt.Errorf("answer %s: %v", b, err)
	}
	p := arrayParser{data: out.Predictions[0].Outputs, what: "outputs"}
	if _, err := p.parse(); err != nil {
		return nil, err
	}
	return p.floats, nil
}
