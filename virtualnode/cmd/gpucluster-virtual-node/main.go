// Command gpucluster-virtual-node registers a virtual-kubelet Node whose pods run on rented GPUs: each pod goes
// to the burst provider service beside it (docs/burst-provider-api.md) and the statuses it reports come back as
// pod statuses. The upstream virtual-kubelet library owns the Node object, its lease, informers and queues.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	logruslogger "github.com/virtual-kubelet/virtual-kubelet/log/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"gpucluster.local/virtualnode/internal/provider"
)

// version is the node's own version, reported by --version and in the Node's kubelet version.
var version = "0.1.0"

// options are the command-line flags.
type options struct {
	nodeName       string
	kubeconfig     string
	providerURL    string
	taint          string
	labels         string
	nodeIP         string
	pollInterval   time.Duration
	gcInterval     time.Duration
	requestTimeout time.Duration
	startupTimeout time.Duration
	listenMetrics  string
	workers        int
	logLevel       string
	showVersion    bool
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gpucluster-virtual-node", flag.ContinueOnError)
	fs.StringVar(&o.nodeName, "nodename", "gpu-burst", "name of the Node object to register (a DNS label)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&o.providerURL, "provider-url", "http://127.0.0.1:10299", "base URL of the burst provider service")
	fs.StringVar(&o.taint, "taint", "virtual-kubelet.io/provider=gpucluster:NoSchedule",
		"taint the Node registers with, key=value:Effect; empty for none")
	fs.StringVar(&o.labels, "labels", "", "extra Node labels, k=v[,k=v...]")
	fs.StringVar(&o.nodeIP, "node-ip", os.Getenv("POD_IP"), "InternalIP address of the Node (default $POD_IP)")
	fs.DurationVar(&o.pollInterval, "poll-interval", time.Second, "how often pod statuses are polled from the service")
	fs.DurationVar(&o.gcInterval, "gc-interval", 10*time.Second,
		"how often Failed pods whose replacement exists are deleted")
	fs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "timeout of one call to the service")
	fs.DurationVar(&o.startupTimeout, "startup-timeout", 5*time.Minute,
		"how long to wait for the service's /healthz and /v1/capacity and for the Node to be ready")
	fs.StringVar(&o.listenMetrics, "listen-metrics", ":10298", "address serving /metrics and /healthz; empty disables")
	fs.IntVar(&o.workers, "workers", 4, "pod sync workers")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpucluster-virtual-node [flags]\n\n"+
			"Registers a virtual-kubelet Node whose pods run on rented GPUs through the burst provider service.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.pollInterval <= 0 || o.gcInterval <= 0 || o.requestTimeout <= 0 || o.startupTimeout <= 0 {
		return nil, errors.New("--poll-interval, --gc-interval, --request-timeout and --startup-timeout must be positive")
	}
	if o.workers < 1 {
		return nil, errors.New("--workers must be at least 1")
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucluster-virtual-node:", err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("gpucluster-virtual-node", version)
		return
	}
	if err := setupLogging(o.logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "gpucluster-virtual-node:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.G(ctx).WithError(err).Error("the virtual node stopped")
		os.Exit(1)
	}
	log.G(ctx).Info("the virtual node stopped")
}

func setupLogging(level string) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("--log-level %q: %w", level, err)
	}
	logger := logrus.New()
	logger.SetLevel(lvl)
	logger.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	logger.SetOutput(os.Stderr)
	log.L = logruslogger.FromLogrus(logrus.NewEntry(logger))
	return nil
}

// run registers the node and serves until ctx ends (SIGTERM/SIGINT) or the node's controllers stop.
func run(ctx context.Context, o *options) error {
	ctx = log.WithLogger(ctx, log.G(ctx).WithField("node", o.nodeName))
	client, err := kubeClient(o.kubeconfig)
	if err != nil {
		return err
	}
	api, err := provider.NewClient(o.providerURL, o.requestTimeout)
	if err != nil {
		return err
	}
	metrics := provider.NewMetrics()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	spec, err := nodeSpec(o)
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, o.startupTimeout)
	defer cancel()
	if err := retry(startCtx, "the provider service's /healthz", func() error { return api.Healthy(startCtx) }); err != nil {
		return err
	}
	var capacity corev1.ResourceList
	if err := retry(startCtx, "the provider service's /v1/capacity", func() (err error) {
		capacity, err = api.Capacity(startCtx)
		return err
	}); err != nil {
		return err
	}
	spec.Status.Capacity, spec.Status.Allocatable = capacity, capacity.DeepCopy()
	log.G(ctx).WithField("capacity", fmt.Sprint(capacity)).Info("the provider service is ready")

	p := provider.New(api, o.pollInterval, metrics)
	vn, err := nodeutil.NewNode(o.nodeName,
		func(nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) { return p, nil, nil },
		nodeutil.WithClient(newLibraryClient(client)),
		func(cfg *nodeutil.NodeConfig) error {
			cfg.NodeSpec, cfg.NumWorkers = *spec, o.workers
			// The provider service resolves env references (secretKeyRef, configMapKeyRef, envFrom) with Roles
			// limited to the inference namespaces, so the library must not. The flag makes the pod controller
			// (node/pod.go, createOrUpdatePod) skip podutils.PopulateEnvironmentVariables entirely, which also
			// skips: downward-API fieldRef/resourceFieldRef values, $(VAR) expansion, and the service-link
			// variables (KUBERNETES_SERVICE_HOST, <SVC>_SERVICE_HOST...) it would add from the Service lister.
			// It also makes the "has the pod changed" check compare the pod as written (podsEqual) instead of
			// with resolved env. The listers behind it are empty anyway (see libraryClient).
			cfg.SkipDownwardAPIResolution = true
			return nil
		})
	if err != nil {
		return fmt.Errorf("setting up the virtual node: %w", err)
	}
	stopMetrics := serveMetrics(ctx, o.listenMetrics, reg)
	defer stopMetrics()

	go func() { _ = vn.Run(ctx) }()
	if err := vn.WaitReady(ctx, o.startupTimeout); err != nil {
		return fmt.Errorf("the virtual node did not become ready within %s: %w", o.startupTimeout, err)
	}
	log.G(ctx).Info("the virtual node is registered and ready")
	go provider.RunCollector(ctx, client, o.nodeName, o.gcInterval, metrics)

	<-vn.Done()
	if ctx.Err() != nil {
		return nil
	}
	return vn.Err()
}

// kubeClient builds the API client: from the kubeconfig file when given (which must exist), else in-cluster.
func kubeClient(path string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		if _, statErr := os.Stat(path); statErr != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", path, statErr)
		}
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// retry calls f with a growing pause (1s up to 10s) until it succeeds or ctx ends, logging each failure.
func retry(ctx context.Context, what string, f func() error) error {
	pause := time.Second
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			return nil
		}
		log.G(ctx).WithError(err).WithField("attempt", attempt).Infof("waiting for %s", what)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer before the start-up timeout: %w", what, err)
		case <-time.After(pause):
		}
		pause = min(pause*2, 10*time.Second)
	}
}

// serveMetrics serves /metrics and /healthz on addr (nothing when addr is empty); the returned func stops it.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) func() {
	if addr == "" {
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.G(ctx).WithError(err).Error("the metrics server stopped")
		}
	}()
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}
}
