// Command gpucluster-metrics-adapter serves custom.metrics.k8s.io for HorizontalPodAutoscalers: each metric is a
// PromQL query (internal/metricsadapter), so an InferenceService scales on the request rate its Service receives,
// wherever its replicas run. The API server side (aggregation, delegated authentication and authorization,
// discovery, OpenAPI) is sigs.k8s.io/custom-metrics-apiserver's, the library prometheus-adapter is built on.
//
// Its flags are the library's (--secure-port, --cert-dir, --tls-cert-file, --authentication-kubeconfig,
// --authorization-kubeconfig, --lister-kubeconfig, ...) plus --config, the metrics file.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/logs"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver/metrics"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"

	"gpucluster.local/virtualnode/internal/metricsadapter"
)

// version is reported by --version.
var version = "0.1.0"

type adapter struct {
	basecmd.AdapterBase
	configFile  string
	showVersion bool
}

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()
	a := &adapter{}
	a.Name = "gpucluster-metrics-adapter"
	a.Flags().StringVar(&a.configFile, "config", "", "the metrics file (JSON: prometheusUrl, namespaces, metrics)")
	a.Flags().BoolVar(&a.showVersion, "version", false, "print the version and exit")
	logs.AddFlags(a.Flags())
	if err := a.Flags().Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpucluster-metrics-adapter:", err)
		os.Exit(2)
	}
	if a.showVersion {
		fmt.Println("gpucluster-metrics-adapter", version)
		return
	}
	if err := run(a); err != nil {
		fmt.Fprintln(os.Stderr, "gpucluster-metrics-adapter:", err)
		os.Exit(1)
	}
}

func run(a *adapter) error {
	if a.configFile == "" {
		return fmt.Errorf("--config is required")
	}
	data, err := os.ReadFile(a.configFile)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	config, err := metricsadapter.ParseConfig(data)
	if err != nil {
		return fmt.Errorf("--config %s: %w", a.configFile, err)
	}
	querier, err := metricsadapter.NewQuerier(config.PrometheusURL, config.Timeout())
	if err != nil {
		return err
	}
	client, err := a.DynamicClient()
	if err != nil {
		return fmt.Errorf("a client of the API server: %w", err)
	}
	mapper, err := a.RESTMapper()
	if err != nil {
		return fmt.Errorf("the API server's discovery: %w", err)
	}
	a.WithCustomMetrics(metricsadapter.NewProvider(config, querier, mapper, client))
	if err := metrics.RegisterMetrics(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering the API server's metrics: %w", err)
	}
	klog.InfoS("serving custom metrics", "metrics", len(config.Metrics), "namespaces", config.Namespaces,
		"prometheus", config.PrometheusURL)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}
