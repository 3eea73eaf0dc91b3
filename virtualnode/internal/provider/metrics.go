package provider

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the node's own Prometheus series (the library adds none of its own to this registry).
type Metrics struct {
	// Requests counts calls to the provider service by operation (create, list, delete) and result.
	Requests *prometheus.CounterVec
	// Pods is how many pods the node runs, by phase.
	Pods *prometheus.GaugeVec
	// Up is 1 while the provider service answers, 0 after a failed call.
	Up prometheus.Gauge
	// Collected counts Failed pods deleted once their replacement existed.
	Collected prometheus.Counter
}

// NewMetrics creates the series; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpucluster_virtual_node_provider_requests_total",
			Help: "Calls to the burst provider service by operation and result.",
		}, []string{"operation", "result"}),
		Pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpucluster_virtual_node_pods",
			Help: "Pods on the virtual node by phase.",
		}, []string{"phase"}),
		Up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpucluster_virtual_node_provider_up",
			Help: "1 while the burst provider service answers, 0 after a failed call.",
		}),
		Collected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpucluster_virtual_node_failed_pods_collected_total",
			Help: "Failed pods deleted once a replacement existed.",
		}),
	}
}

// Register adds every series to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Requests, m.Pods, m.Up, m.Collected} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
