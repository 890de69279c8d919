package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"

	"gorun/datasets"
	"gorun/model"
	"gorun/model/serve"
)

// defaultServeAddr is where gorun serve listens unless --addr says
// otherwise: this machine only.
const defaultServeAddr = "127.0.0.1:8080"

// serveCmd is `gorun serve RUN_DIR [--addr HOST:PORT] [--max-batch N]
// [--max-body SIZE] [--timeout D] …`: it loads the run's model (package
// model) and answers predictions over HTTP (package model/serve) until
// SIGINT or SIGTERM, then stops gracefully: the requests under way are
// answered, and gorun exits with status 0. A second signal kills it.
func serveCmd(args []string, stdout, stderr io.Writer) error {
	return untilSignalled(func(ctx context.Context) error { return serveModel(ctx, args, stdout, stderr) })
}

// serveModel is serveCmd until ctx ends.
func serveModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gorun serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultServeAddr, "listen on `HOST:PORT` (another host than 127.0.0.1 or localhost opens the model to other machines)")
	maxBatch := fs.Int("max-batch", model.DefaultMaxBatch, "the largest batch the model runs: requests that arrive together are joined up to it")
	maxBody := fs.String("max-body", "10MiB", "the largest request body (`SIZE`: bytes, or with KiB, MiB, KB, MB)")
	timeout := fs.Duration("timeout", serve.DefaultTimeout, "the most a request may take, waiting for its turn included (then 504)")
	maxConcurrent := fs.Int("max-concurrent", serve.DefaultMaxConcurrent, "requests read and answered at once")
	maxQueue := fs.Int("max-queue", serve.DefaultMaxQueue, "requests that may wait for a turn beyond --max-concurrent (more get 503; 0: none wait)")
	maxTokens := fs.Int("max-tokens", serve.DefaultMaxTokens, "the most tokens one /v1/generate request may add")
	weights := fs.String("weights", "", "weights `file` (default RUN_DIR/model.safetensors)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gorun serve RUN_DIR [--addr HOST:PORT] [--max-batch N] [--max-body SIZE] [--timeout D] [--weights FILE]  (answer predictions over HTTP)")
		fs.PrintDefaults()
	}
	pos, err := parseCmdArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Sprintf("serve needs exactly one RUN_DIR (the --out of a run), got %d arguments", len(pos))}
	}
	dir := pos[0]
	body, err := parseSize(*maxBody)
	if err != nil {
		return &usageError{fmt.Sprintf("--max-body %s: %v", *maxBody, err)}
	}
	switch {
	case *maxBatch < 1:
		return &usageError{fmt.Sprintf("--max-batch %d: want at least 1", *maxBatch)}
	case *timeout <= 0:
		return &usageError{fmt.Sprintf("--timeout %v: want more than 0", *timeout)}
	case *maxConcurrent < 1:
		return &usageError{fmt.Sprintf("--max-concurrent %d: want at least 1", *maxConcurrent)}
	case *maxQueue < 0:
		return &usageError{fmt.Sprintf("--max-queue %d: want 0 or more", *maxQueue)}
	case *maxTokens < 1:
		return &usageError{fmt.Sprintf("--max-tokens %d: want at least 1", *maxTokens)}
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return &usageError{fmt.Sprintf("--addr %s: want HOST:PORT, such as %s", *addr, defaultServeAddr)}
	}
	opts := serve.Options{MaxBody: body, Timeout: *timeout, MaxConcurrent: *maxConcurrent,
		MaxQueue: *maxQueue, MaxTokens: *maxTokens, Log: log.New(stderr, "gorun serve: ", log.LstdFlags),
		OnStop: func(n int) {
			fmt.Fprintf(stdout, "gorun serve: stopping: answering the %d request(s) under way\n", n)
		}}
	if *maxQueue == 0 {
		opts.MaxQueue = -1 // none wait
	}
	if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
		// Reached from other machines, by whatever name they know it.
		opts.AnyHost = true
		fmt.Fprintf(stderr, "gorun serve: --addr %s may be reached from other machines: whoever does can use the model\n", *addr)
	}
	// The address first: an address in use is said before the model loads.
	ln, err := serve.Listen(*addr)
	if err != nil {
		return fmt.Errorf("--addr %w", err)
	}
	defer ln.Close()
	mopts := []model.Option{model.WithMaxBatch(*maxBatch)}
	if *weights != "" {
		mopts = append(mopts, model.WithWeights(*weights))
	}
	m, err := model.Load(dir, mopts...)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "model: "))
	}
	defer m.Close()
	s, err := serve.New(m, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "gorun serve: %s: %s\n", dir, summary(m))
	routes := "POST /v1/predict"
	if m.Kind() == model.Sequence {
		routes += ", POST /v1/generate"
	}
	fmt.Fprintf(stdout, "gorun serve: http://%s/ (%s, GET /healthz, GET /metrics; Ctrl-C stops)\n", ln.Addr(), routes)
	err = s.Serve(ctx, ln)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(stdout, "gorun serve: stopped")
	return nil
}

// summary describes a model in one line.
func summary(m *model.Model) string {
	var what string
	switch m.Kind() {
	case model.Classifier:
		what = fmt.Sprintf("a classifier of %d classes", m.Classes())
		if names := m.ClassNames(); len(names) > 0 {
			what += " (" + datasets.QuoteList(names, 10) + ")"
		}
		what += fmt.Sprintf(", samples %v", m.InputShape())
	case model.Regressor:
		what = fmt.Sprintf("a regression model, samples %v to values %v", m.InputShape(), m.OutputShape())
	default:
		what = fmt.Sprintf("a sequence model of a %d-token vocabulary, windows of %d tokens", m.Classes(), m.InputShape()[0])
	}
	return fmt.Sprintf("%s%s; batches of up to %d", what, normSummary(m), m.MaxBatch())
}

// normSummary says how the model's inputs were normalised, for summary:
// "" when they were not.
func normSummary(m *model.Model) string {
	if m.Kind() == model.Sequence {
		return ""
	}
	mean, std := m.Normalization()
	same := true
	for i := range mean {
		same = same && mean[i] == 0 && std[i] == 1
	}
	if same {
		return ""
	}
	list := func(v []float64) string {
		s := make([]string, len(v))
		for i, f := range v {
			s[i] = strconv.FormatFloat(f, 'g', 4, 64)
		}
		if len(s) == 1 {
			return s[0]
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	switch {
	case m.DataKind() == "csv":
		return fmt.Sprintf(", its %d input columns standardised", len(mean))
	case len(mean) > 1:
		return fmt.Sprintf(", channels normalised with means %s and stds %s", list(mean), list(std))
	}
	return fmt.Sprintf(", inputs normalised with mean %s and std %s", strconv.FormatFloat(mean[0], 'g', -1, 32), strconv.FormatFloat(std[0], 'g', -1, 32))
}

// parseSize reads a size in bytes: a number, with a unit or not ("10MiB",
// "512KB", "1048576").
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		name string
		size int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if n, ok := strings.CutSuffix(t, u.name); ok {
			t, mult = strings.TrimSpace(n), u.size
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 1 || n > (1<<40)/mult {
		return 0, fmt.Errorf("want a size such as 10MiB or a number of bytes, from 1 to 1TiB")
	}
	return n * mult, nil
}
