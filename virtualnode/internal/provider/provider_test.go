package provider

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
)

// recorder collects the pods passed to the status callback.
type recorder struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (r *recorder) notify(p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, p)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods)
}

func (r *recorder) last() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pods[len(r.pods)-1]
}

// newProvider returns a provider on url whose callback is rec, without the polling goroutine: tests call Poll.
func newProvider(t *testing.T, url string) (*Provider, *recorder) {
	t.Helper()
	c, err := NewClient(url, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := New(c, time.Second, nil)
	p.now = func() time.Time { return t0 }
	rec := &recorder{}
	p.notify = rec.notify
	return p, rec
}

func TestCreateReportsTheServiceStatusAtOnce(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("a", "uid-a")); err != nil {
		t.Fatal(err)
	}
	if f.posts != 1 || rec.count() != 1 || rec.last().Status.Reason != "ProviderCreating" {
		t.Fatalf("posts=%d notifications=%d", f.posts, rec.count())
	}
	got, err := p.GetPod(ctx, "inference", "a")
	if err != nil || got.Status.Phase != corev1.PodPending {
		t.Fatalf("GetPod = %v, %v", got, err)
	}
}

func TestPollReportsOnlyChangedStatuses(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	_ = p.CreatePod(ctx, testPod("a", "uid-a"))
	p.Poll(ctx)
	if rec.count() != 1 {
		t.Fatalf("an unchanged status was reported again (%d notifications)", rec.count())
	}
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Running", Address: "203.0.113.7",
		Containers: []ContainerStatus{{Name: "server", State: "running"}, {Name: "sidecar", State: "running"}}})
	p.Poll(ctx)
	if rec.count() != 2 || rec.last().Status.Phase != corev1.PodRunning || rec.last().Status.PodIP != "203.0.113.7" {
		t.Fatalf("running status not reported: %d notifications", rec.count())
	}
	status, err := p.GetPodStatus(ctx, "inference", "a")
	if err != nil || status.Phase != corev1.PodRunning {
		t.Fatalf("GetPodStatus = %v, %v", status, err)
	}
	// A status for another pod with the same name (a different uid) is not this pod's: it is not applied, and
	// this pod, no longer listed, is posted again.
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-other", Phase: "Failed"})
	p.Poll(ctx)
	if rec.last().Status.Phase == corev1.PodFailed || f.posts != 2 {
		t.Errorf("phase=%s posts=%d: a status of another uid was applied", rec.last().Status.Phase, f.posts)
	}
}

// A restarted service rebuilds its records from the providers' listings but knows nothing of a pod's readiness,
// so it lists a rebuilt pod only once it has the pod: the node posts it again with the status it last reported
// (the service resumes the pod's probes from it), and changes nothing meanwhile.
func TestAPodTheServiceNoLongerListsIsPostedAgainWithItsLastKnownStatus(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	_ = p.CreatePod(ctx, testPod("a", "uid-a"))
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Running", Address: "203.0.113.7",
		Containers: []ContainerStatus{{Name: "server", State: "running", Ready: ptr(true)},
			{Name: "sidecar", State: "running", Ready: ptr(true)}}})
	p.Poll(ctx)
	if !podReady(rec.last()) {
		t.Fatalf("a running pod whose containers are ready is not Ready: %+v", rec.last().Status.Conditions)
	}
	reported := rec.count()
	f.mu.Lock()
	f.statuses = map[string]PodStatus{} // the service restarted: the pod is no longer listed
	f.mu.Unlock()
	p.Poll(ctx)
	if f.posts != 2 {
		t.Fatalf("the pod was not posted again (%d posts)", f.posts)
	}
	again := f.posted[len(f.posted)-1]
	if again.Status.Phase != corev1.PodRunning || len(again.Status.ContainerStatuses) != 2 ||
		!again.Status.ContainerStatuses[0].Ready || !again.Status.ContainerStatuses[1].Ready {
		t.Fatalf("the pod was posted without the status the node last reported: %+v", again.Status)
	}
	if rec.count() != reported+1 {
		t.Fatalf("%d notifications after the post, want the post's answer alone", rec.count()-reported)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestServiceFailureBecomesFailedPod(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	_ = p.CreatePod(ctx, testPod("a", "uid-a"))
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Failed", Reason: "InstanceVanished",
		Message: "instance i-123 is gone from the provider's listing"})
	p.Poll(ctx)
	got := rec.last()
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "InstanceVanished" {
		t.Fatalf("status = %s/%s", got.Status.Phase, got.Status.Reason)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 137 {
			t.Errorf("container %s: %+v", cs.Name, cs.State)
		}
	}
}

func TestRejectedCreateFailsThePodAndIsNotRetried(t *testing.T) {
	f, srv := newFakeService(t)
	f.reject = "gpu type B200 is offered by no provider"
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("a", "uid-a")); err != nil {
		t.Fatalf("CreatePod must not return the rejection (the library would leave the pod Pending): %v", err)
	}
	if rec.count() != 1 {
		t.Fatalf("notifications = %d", rec.count())
	}
	got := rec.last().Status
	if got.Phase != corev1.PodFailed || got.Reason != ReasonRejected {
		t.Fatalf("status = %s/%s", got.Phase, got.Reason)
	}
	p.Poll(ctx)
	if f.posts != 1 {
		t.Errorf("a rejected pod was posted again (%d posts)", f.posts)
	}
}

func TestUnreachableServiceChangesNothingThenRetries(t *testing.T) {
	f, srv := newFakeService(t)
	down := httptest.NewServer(nil)
	downURL := down.URL
	down.Close() // connection refused from here on
	p, rec := newProvider(t, downURL)
	ctx := context.Background()
	if err := p.CreatePod(ctx, testPod("a", "uid-a")); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	p.Poll(ctx)
	if rec.count() != 0 {
		t.Fatalf("an unreachable service changed the pod status (%d notifications)", rec.count())
	}
	got, err := p.GetPod(ctx, "inference", "a")
	if err != nil || got.Status.Phase != "" {
		t.Fatalf("GetPod = %+v, %v", got.Status, err)
	}
	// The service comes back: the next poll posts the pod again.
	p.client, _ = NewClient(srv.URL, time.Second)
	p.Poll(ctx)
	if f.posts != 1 || rec.count() != 1 || rec.last().Status.Phase != corev1.PodPending {
		t.Fatalf("posts=%d notifications=%d", f.posts, rec.count())
	}
}

func TestDeleteReportsATerminalStatusAndForgetsThePod(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	pod := testPod("a", "uid-a")
	_ = p.CreatePod(ctx, pod)
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Running",
		Containers: []ContainerStatus{{Name: "server", State: "running"}, {Name: "sidecar", State: "running"}}})
	p.Poll(ctx)
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got := rec.last().Status
	if got.Phase != corev1.PodSucceeded {
		t.Fatalf("phase after delete = %s", got.Phase)
	}
	for _, cs := range got.ContainerStatuses {
		if cs.State.Terminated == nil {
			t.Errorf("container %s is not terminated after delete", cs.Name)
		}
	}
	if _, err := p.GetPod(ctx, "inference", "a"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod after delete = %v, want NotFound", err)
	}
	// Deleting again: the service answers 404, which is success; the node no longer knows the pod.
	if err := p.DeletePod(ctx, pod); !errdefs.IsNotFound(err) {
		t.Errorf("second delete = %v, want NotFound", err)
	}
	if len(f.deletes) != 2 || f.deletes[0] != "inference/a?uid-a" {
		t.Errorf("deletes = %v", f.deletes)
	}
}

// A replica with a preStop sleep drains: the service keeps its instance serving and lists it until it is deleted;
// the pod stays Terminating with the service's Running status meanwhile, and only then turns terminal.
func TestDeleteOfADrainingPodWaitsForTheServiceToLetItGo(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	pod := testPod("a", "uid-a")
	_ = p.CreatePod(ctx, pod)
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Running",
		Containers: []ContainerStatus{{Name: "server", State: "running"}, {Name: "sidecar", State: "running"}}})
	p.Poll(ctx)
	f.mu.Lock()
	f.drain = 5
	f.mu.Unlock()
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p.Poll(ctx)
	if got := rec.last().Status.Phase; got != corev1.PodRunning {
		t.Fatalf("phase while draining = %s, want Running", got)
	}
	f.mu.Lock()
	posts := f.posts
	f.mu.Unlock()
	if posts != 1 {
		t.Errorf("a draining pod was posted again: %d creates", posts)
	}
	f.mu.Lock()
	delete(f.statuses, "inference/a") // drained: the instance is gone
	f.mu.Unlock()
	p.Poll(ctx)
	if got := rec.last().Status.Phase; got != corev1.PodSucceeded {
		t.Fatalf("phase once drained = %s, want Succeeded", got)
	}
	if _, err := p.GetPod(ctx, "inference", "a"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod once drained = %v, want NotFound", err)
	}
}

func TestDeleteOfAFailedPodKeepsItFailed(t *testing.T) {
	f, srv := newFakeService(t)
	p, rec := newProvider(t, srv.URL)
	ctx := context.Background()
	pod := testPod("a", "uid-a")
	_ = p.CreatePod(ctx, pod)
	f.set(PodStatus{Namespace: "inference", Name: "a", UID: "uid-a", Phase: "Failed", Reason: "InstanceDied"})
	p.Poll(ctx)
	n := rec.count()
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if rec.count() != n || rec.last().Status.Phase != corev1.PodFailed {
		t.Errorf("a Failed pod's status changed on delete: %s", rec.last().Status.Phase)
	}
}

func TestDeleteWhileServiceIsDownIsAnError(t *testing.T) {
	down := httptest.NewServer(nil)
	downURL := down.URL
	down.Close()
	p, _ := newProvider(t, downURL)
	if err := p.DeletePod(context.Background(), testPod("a", "uid-a")); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("delete with the service down = %v, want an error the library retries", err)
	}
}

func TestUnknownPodsAreNotFound(t *testing.T) {
	_, srv := newFakeService(t)
	p, _ := newProvider(t, srv.URL)
	if _, err := p.GetPod(context.Background(), "inference", "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPod = %v", err)
	}
	if _, err := p.GetPodStatus(context.Background(), "inference", "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("GetPodStatus = %v", err)
	}
	pods, err := p.GetPods(context.Background())
	if err != nil || len(pods) != 0 {
		t.Errorf("GetPods = %v, %v", pods, err)
	}
}

func TestUpdateOnlyRemembersThePod(t *testing.T) {
	f, srv := newFakeService(t)
	p, _ := newProvider(t, srv.URL)
	ctx := context.Background()
	pod := testPod("a", "uid-a")
	_ = p.CreatePod(ctx, pod)
	changed := pod.DeepCopy()
	changed.Labels = map[string]string{"new": "label"}
	if err := p.UpdatePod(ctx, changed); err != nil {
		t.Fatal(err)
	}
	got, _ := p.GetPod(ctx, "inference", "a")
	if got.Labels["new"] != "label" || f.posts != 1 {
		t.Errorf("labels=%v posts=%d", got.Labels, f.posts)
	}
}
