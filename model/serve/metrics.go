package serve

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gorun/model"
)

// metrics are one Server's Prometheus metrics, in a registry of its own
// (no package-level state: two Servers in one program count apart).
// github.com/prometheus/client_golang writes the exposition formats
// (text, OpenMetrics, by content negotiation), so scrapers read what
// they expect; it brings the Go runtime's and the process's metrics too.
type metrics struct {
	requests *prometheus.CounterVec   // by route and status code
	latency  *prometheus.HistogramVec // by route
	samples  prometheus.Histogram     // samples per /v1/predict request
	inFlight prometheus.Gauge         // /v1/ requests under way
	queued   prometheus.Gauge         // /v1/ requests waiting for a turn
	handler  http.Handler             // GET /metrics
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gorun_serve_requests_total",
			Help: "HTTP requests answered, by route (predict, generate, healthz, metrics, other) and status code (499: the client went away).",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gorun_serve_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
		}, []string{"route"}),
		samples: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gorun_serve_request_samples",
			Help:    "Samples in each /v1/predict request that reached the model.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gorun_serve_in_flight_requests",
			Help: "/v1/ requests being read or answered (at most --max-concurrent).",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gorun_serve_queued_requests",
			Help: "/v1/ requests waiting for a turn (at most --max-queue).",
		}),
	}
	stat := func(name, help string, f func(model.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(s.m.Stats())) })
	}
	reg.MustRegister(m.requests, m.latency, m.samples, m.inFlight, m.queued,
		stat("gorun_model_requests_total", "Predict calls the model queued.", func(st model.Stats) int64 { return st.Requests }),
		stat("gorun_model_batches_total", "Batches the model's arenas ran.", func(st model.Stats) int64 { return st.Batches }),
		stat("gorun_model_samples_total", "Samples in the batches the model ran (divided by the batches: the mean batch size).", func(st model.Stats) int64 { return st.Samples }),
		stat("gorun_model_joined_batches_total", "Batches that held samples of more than one request.", func(st model.Stats) int64 { return st.Joined }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gorun_model_mean_batch_size",
			Help: "Samples per batch the model ran since it was loaded.",
		}, func() float64 {
			st := s.m.Stats()
			if st.Batches == 0 {
				return 0
			}
			return float64(st.Samples) / float64(st.Batches)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gorun_model_max_batch",
			Help: "The largest batch the model's arenas run (--max-batch).",
		}, func() float64 { return float64(s.m.MaxBatch()) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: s.opts.Log, Timeout: s.opts.WriteTimeout})
	return m
}

// observe counts one answered request.
func (m *metrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}
