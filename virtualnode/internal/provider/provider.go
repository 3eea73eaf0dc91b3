// Package provider implements the virtual node's pod lifecycle on top of the burst provider service: pods go to
// the service over its loopback HTTP API (docs/burst-provider-api.md) and the statuses it reports come back as
// pod statuses.
package provider

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// entry is what the node knows of one pod: the pod object, the service's last status and the pod status derived
// from it. terminal marks a status the node decided itself (rejected, deleted) that polling must not overwrite.
type entry struct {
	pod      *corev1.Pod
	svc      *PodStatus
	status   *corev1.PodStatus
	terminal bool
	// draining: deleted, and the service keeps the instance serving through the pod's preStop sleep; the pod
	// stays Terminating with the service's status until the service no longer lists it.
	draining bool
}

// Provider is the node.PodLifecycleHandler and node.PodNotifier of the virtual node.
type Provider struct {
	client   *Client
	metrics  *Metrics
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	pods    map[string]*entry
	notify  func(*corev1.Pod)
	unreach bool // the last call to the service failed; logged once until it answers again
}

// New returns a provider that talks to the service through client and polls it every interval; metrics may
// be nil.
func New(client *Client, interval time.Duration, metrics *Metrics) *Provider {
	if metrics == nil {
		metrics = NewMetrics()
	}
	if interval <= 0 {
		interval = time.Second
	}
	return &Provider{client: client, metrics: metrics, interval: interval, now: time.Now, pods: map[string]*entry{}}
}

func key(namespace, name string) string { return namespace + "/" + name }

// CreatePod hands the pod to the service and returns at once. A 4xx answer fails the pod (ProviderRejected);
// an unreachable or failing service changes nothing and the poll loop retries the create.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	p.pods[key(pod.Namespace, pod.Name)] = &entry{pod: pod.DeepCopy()}
	p.mu.Unlock()
	p.create(ctx, pod)
	return nil
}

// create posts the pod and applies the answer.
func (p *Provider) create(ctx context.Context, pod *corev1.Pod) {
	logger := log.G(ctx).WithField("pod", key(pod.Namespace, pod.Name)).WithField("uid", string(pod.UID))
	status, err := p.client.CreatePod(ctx, pod)
	switch {
	case err == nil:
		p.metrics.Requests.WithLabelValues("create", "ok").Inc()
		p.reachable(ctx)
		if status != nil {
			p.apply(ctx, status, false)
		}
	case IsRejected(err):
		p.metrics.Requests.WithLabelValues("create", "rejected").Inc()
		logger.WithError(err).Warn("the provider service rejected the pod; reporting it Failed")
		p.apply(ctx, rejectedStatus(pod, err.Error()), true)
	default:
		p.metrics.Requests.WithLabelValues("create", "error").Inc()
		p.unreachable(ctx, err)
		logger.WithError(err).Debug("creating the pod in the provider service failed; will retry")
	}
}

// UpdatePod only remembers the new pod object: pods are immutable for the provider service.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pods[key(pod.Namespace, pod.Name)]; ok {
		e.pod = pod.DeepCopy()
		return nil
	}
	p.pods[key(pod.Namespace, pod.Name)] = &entry{pod: pod.DeepCopy()}
	return nil
}

// DeletePod deletes the pod's instance (404 counts as done), then reports a terminal status with every
// container terminated, as the library expects, and forgets the pod. An unreachable service is an error, so
// the library retries the delete.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	drain, err := p.client.DeletePod(ctx, pod.Namespace, pod.Name, string(pod.UID))
	if err != nil {
		p.metrics.Requests.WithLabelValues("delete", "error").Inc()
		p.unreachable(ctx, err)
		return fmt.Errorf("deleting pod %s/%s in the provider service: %w", pod.Namespace, pod.Name, err)
	}
	p.metrics.Requests.WithLabelValues("delete", "ok").Inc()
	k := key(pod.Namespace, pod.Name)
	p.mu.Lock()
	e, ok := p.pods[k]
	p.mu.Unlock()
	if !ok {
		return errdefs.NotFoundf("pod %s is not known to the virtual node", k)
	}
	if drain > 0 {
		// The instance serves on through the pod's preStop sleep: the pod stays Terminating (the library deletes
		// it once the grace period passes or its status turns terminal) until the service lets it go.
		p.mu.Lock()
		e.draining = true
		p.mu.Unlock()
		log.G(ctx).WithField("pod", k).WithField("drain", drain).Info("pod draining before its instance is deleted")
		return nil
	}
	p.apply(ctx, deletedStatus(pod, e.svc), true)
	p.mu.Lock()
	delete(p.pods, k)
	p.mu.Unlock()
	return nil
}

// GetPod returns the pod with its last known status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.pods[key(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not known to the virtual node", namespace, name)
	}
	return e.podWithStatus(), nil
}

// GetPodStatus returns the pod's last known status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns every pod the node runs.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, e := range p.pods {
		out = append(out, e.podWithStatus())
	}
	return out, nil
}

func (e *entry) podWithStatus() *corev1.Pod {
	pod := e.pod.DeepCopy()
	if e.status != nil {
		pod.Status = *e.status.DeepCopy()
	}
	return pod
}

// NotifyPods registers the status callback and starts polling the service every interval until ctx ends.
func (p *Provider) NotifyPods(ctx context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	p.mu.Unlock()
	go p.pollLoop(ctx)
}

// pollLoop polls the service every interval until ctx ends.
func (p *Provider) pollLoop(ctx context.Context) {
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.Poll(ctx)
		}
	}
}

// Poll lists the service's pods once and reports every status that changed. Pods the service does not list
// (yet) are posted again, each with the status last reported: the create is idempotent, so this retries creates
// that did not reach the service and re-registers pods a restarted service lost. A failed listing changes
// nothing (fail-static).
func (p *Provider) Poll(ctx context.Context) {
	statuses, err := p.client.ListPods(ctx)
	if err != nil {
		p.metrics.Requests.WithLabelValues("list", "error").Inc()
		p.unreachable(ctx, err)
		return
	}
	p.metrics.Requests.WithLabelValues("list", "ok").Inc()
	p.reachable(ctx)
	listed := map[string]*PodStatus{}
	for i := range statuses {
		listed[key(statuses[i].Namespace, statuses[i].Name)] = &statuses[i]
	}
	var missing, drained []*corev1.Pod
	p.mu.Lock()
	for k, e := range p.pods {
		if e.terminal {
			continue
		}
		if s, ok := listed[k]; ok && s.UID == string(e.pod.UID) {
			continue
		}
		if e.draining { // the service let it go: its instance is deleted
			drained = append(drained, e.pod.DeepCopy())
			continue
		}
		// Posted with the status last reported: a restarted service resumes the pod's probes from it rather
		// than take its readiness away (it lists a pod rebuilt from its providers only once it has the pod).
		missing = append(missing, e.podWithStatus())
	}
	p.mu.Unlock()
	for _, pod := range drained {
		k := key(pod.Namespace, pod.Name)
		p.mu.Lock()
		var last *PodStatus
		if e, ok := p.pods[k]; ok {
			last = e.svc
		}
		p.mu.Unlock()
		p.apply(ctx, deletedStatus(pod, last), true)
		p.mu.Lock()
		delete(p.pods, k)
		p.mu.Unlock()
	}
	for _, s := range listed {
		p.apply(ctx, s, false)
	}
	for _, pod := range missing {
		p.create(ctx, pod)
	}
	p.countPhases()
}

// apply records a service status for a pod the node knows and calls the callback when it changed. terminal
// statuses are the node's own decisions; a later service status never replaces them.
func (p *Provider) apply(ctx context.Context, s *PodStatus, terminal bool) {
	p.mu.Lock()
	e, ok := p.pods[key(s.Namespace, s.Name)]
	if !ok || string(e.pod.UID) != s.UID || (e.terminal && !terminal) || reflect.DeepEqual(e.svc, s) {
		p.mu.Unlock()
		return
	}
	status := ToPodStatus(e.pod, s, p.now())
	e.svc, e.status, e.terminal = s, &status, terminal
	pod := e.podWithStatus()
	cb := p.notify
	p.mu.Unlock()
	log.G(ctx).WithField("pod", key(s.Namespace, s.Name)).WithField("phase", s.Phase).WithField("reason", s.Reason).
		Info("pod status changed")
	if cb != nil {
		cb(pod)
	}
}

// countPhases refreshes the pods-by-phase gauge.
func (p *Provider) countPhases() {
	counts := map[string]float64{}
	p.mu.Lock()
	for _, e := range p.pods {
		phase := string(corev1.PodPending)
		if e.status != nil {
			phase = string(e.status.Phase)
		}
		counts[phase]++
	}
	p.mu.Unlock()
	for _, phase := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed} {
		p.metrics.Pods.WithLabelValues(string(phase)).Set(counts[string(phase)])
	}
}

// unreachable logs the first failure to talk to the service until it answers again.
func (p *Provider) unreachable(ctx context.Context, err error) {
	p.metrics.Up.Set(0)
	p.mu.Lock()
	first := !p.unreach
	p.unreach = true
	p.mu.Unlock()
	if first {
		log.G(ctx).WithError(err).Warn("the provider service is unreachable or failing; pod statuses stay as they are")
	}
}

func (p *Provider) reachable(ctx context.Context) {
	p.metrics.Up.Set(1)
	p.mu.Lock()
	was := p.unreach
	p.unreach = false
	p.mu.Unlock()
	if was {
		log.G(ctx).Info("the provider service answers again")
	}
}

var errUnsupported = errdefs.InvalidInput("not supported by the gpucluster virtual node")

// GetContainerLogs relays the container's log from the service.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	rc, err := p.client.Logs(ctx, namespace, podName, containerName, opts.Tail)
	if IsNotFound(err) {
		return nil, errdefs.NotFoundf("pod %s/%s is not known to the provider service", namespace, podName)
	}
	return rc, err
}

// RunInContainer is not supported: external instances offer no exec channel.
func (p *Provider) RunInContainer(context.Context, string, string, string, []string, api.AttachIO) error {
	return errUnsupported
}

// AttachToContainer is not supported.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errUnsupported
}

// GetStatsSummary is not supported.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errUnsupported
}

// GetMetricsResource is not supported.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errUnsupported
}

// PortForward is not supported.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errUnsupported
}
