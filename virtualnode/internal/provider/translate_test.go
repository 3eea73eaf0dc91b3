package provider

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func conditionStatus(s corev1.PodStatus, kind corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == kind {
			return c.Status
		}
	}
	return ""
}

func TestPendingStatusKeepsContainersWaiting(t *testing.T) {
	pod := testPod("a", "uid-a")
	got := ToPodStatus(pod, &PodStatus{Phase: "Pending", Reason: "ProviderCreating", Message: "renting an H100"}, t0)
	if got.Phase != corev1.PodPending || got.Reason != "ProviderCreating" {
		t.Fatalf("phase/reason = %s/%s", got.Phase, got.Reason)
	}
	if len(got.ContainerStatuses) != 2 {
		t.Fatalf("want a status per spec container, got %d", len(got.ContainerStatuses))
	}
	for _, cs := range got.ContainerStatuses {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ProviderCreating" || cs.Ready {
			t.Errorf("container %s: %+v", cs.Name, cs.State)
		}
	}
	if conditionStatus(got, corev1.PodScheduled) != corev1.ConditionTrue ||
		conditionStatus(got, corev1.PodInitialized) != corev1.ConditionFalse ||
		conditionStatus(got, corev1.PodReady) != corev1.ConditionFalse {
		t.Errorf("conditions = %+v", got.Conditions)
	}
	if got.PodIP != "" || got.HostIP != "" {
		t.Errorf("a pending pod has no address: %q %q", got.PodIP, got.HostIP)
	}
}

func TestRunningStatusIsReadyWithPodIP(t *testing.T) {
	pod := testPod("a", "uid-a")
	got := ToPodStatus(pod, &PodStatus{
		Phase: "Running", Address: "203.0.113.7", StartTime: ptr(t0),
		Containers: []ContainerStatus{
			{Name: "server", State: "running", StartedAt: ptr(t0), RestartCount: 2},
			{Name: "sidecar", State: "running"},
		},
	}, t0)
	if got.Phase != corev1.PodRunning || got.PodIP != "203.0.113.7" || len(got.PodIPs) != 1 {
		t.Fatalf("phase/podIP = %s/%q", got.Phase, got.PodIP)
	}
	if got.StartTime == nil || !got.StartTime.Time.Equal(t0) {
		t.Errorf("startTime = %v", got.StartTime)
	}
	for _, cs := range got.ContainerStatuses {
		if cs.State.Running == nil || !cs.Ready {
			t.Errorf("container %s not running and ready: %+v", cs.Name, cs)
		}
	}
	if got.ContainerStatuses[0].RestartCount != 2 || got.ContainerStatuses[0].Image != "example/server:1" {
		t.Errorf("server status = %+v", got.ContainerStatuses[0])
	}
	for _, kind := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if conditionStatus(got, kind) != corev1.ConditionTrue {
			t.Errorf("condition %s is not True", kind)
		}
	}
}

// A rented replica runs before it serves: the service reports the container running and not ready until its
// readiness probe passes against the instance, and the pod says so as a kubelet would.
func TestRunningButNotReadyUntilTheServiceSaysTheProbePassed(t *testing.T) {
	no, yes := false, true
	status := func(ready *bool) corev1.PodStatus {
		return ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Running", Address: "203.0.113.7",
			Containers: []ContainerStatus{
				{Name: "server", State: "running", Ready: ready, Started: &yes},
				{Name: "sidecar", State: "running", Ready: &yes},
			}}, t0)
	}
	got := status(&no)
	if got.Phase != corev1.PodRunning || got.ContainerStatuses[0].Ready || !got.ContainerStatuses[1].Ready {
		t.Fatalf("phase %s, ready %v/%v", got.Phase, got.ContainerStatuses[0].Ready, got.ContainerStatuses[1].Ready)
	}
	if s := got.ContainerStatuses[0].Started; s == nil || !*s {
		t.Errorf("server started = %v, want true", s)
	}
	for _, c := range got.Conditions {
		if c.Type == corev1.PodReady && (c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" ||
			c.Message != "containers with unready status: [server]") {
			t.Errorf("Ready condition = %+v", c)
		}
	}
	if conditionStatus(status(&yes), corev1.PodReady) != corev1.ConditionTrue {
		t.Error("both containers ready, the pod is not")
	}
}

func TestRunningWithAContainerNotYetStartedIsNotReady(t *testing.T) {
	got := ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Running", Containers: []ContainerStatus{
		{Name: "server", State: "running"}, {Name: "sidecar", State: "waiting", Reason: "PullingImage"},
	}}, t0)
	if conditionStatus(got, corev1.PodReady) != corev1.ConditionFalse {
		t.Error("a pod with a waiting container was reported Ready")
	}
	if w := got.ContainerStatuses[1].State.Waiting; w == nil || w.Reason != "PullingImage" {
		t.Errorf("sidecar = %+v", got.ContainerStatuses[1].State)
	}
}

func TestHostnameAddressIsNotAPodIP(t *testing.T) {
	got := ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Running", Address: "abc-8080.proxy.example.net"}, t0)
	if got.PodIP != "" || len(got.PodIPs) != 0 {
		t.Errorf("podIP = %q for a hostname address", got.PodIP)
	}
}

func TestSucceededTerminatesContainersWithExitZero(t *testing.T) {
	got := ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Succeeded"}, t0)
	for _, cs := range got.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("container %s: %+v", cs.Name, cs.State)
		}
	}
}

func TestUnknownPhaseIsPending(t *testing.T) {
	if got := ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Exploding"}, t0); got.Phase != corev1.PodPending {
		t.Errorf("phase = %s", got.Phase)
	}
}

// The failure rule: every failure reason ends Failed, not Ready, every container terminated with the service's
// exit code (137 when it names none), the reason and message copied.
func TestFailedStatusesTerminateEveryContainer(t *testing.T) {
	cases := []struct {
		reason     string
		containers []ContainerStatus
		wantExit   int32
	}{
		{"ProviderCreateFailed", []ContainerStatus{{Name: "server", State: "terminated", ExitCode: ptr(int32(1))}}, 1},
		{"ProviderTimeout", nil, 137},
		{"InstanceVanished", []ContainerStatus{{Name: "server", State: "terminated", ExitCode: ptr(int32(137))}}, 137},
		{"InstanceDied", []ContainerStatus{{Name: "server", State: "running"}}, 137},
		{"NoCapacity", nil, 137},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			got := ToPodStatus(testPod("a", "uid-a"), &PodStatus{Phase: "Failed", Reason: tc.reason,
				Message: "detail of " + tc.reason, Containers: tc.containers}, t0)
			if got.Phase != corev1.PodFailed || got.Reason != tc.reason || got.Message != "detail of "+tc.reason {
				t.Fatalf("status = %s %s %q", got.Phase, got.Reason, got.Message)
			}
			if conditionStatus(got, corev1.PodReady) != corev1.ConditionFalse {
				t.Error("a Failed pod is Ready")
			}
			server := got.ContainerStatuses[0].State.Terminated
			if server == nil || server.ExitCode != tc.wantExit {
				t.Fatalf("server = %+v, want terminated with %d", got.ContainerStatuses[0].State, tc.wantExit)
			}
			sidecar := got.ContainerStatuses[1].State.Terminated
			if sidecar == nil || sidecar.ExitCode != 137 || sidecar.Reason != tc.reason {
				t.Errorf("sidecar = %+v", got.ContainerStatuses[1].State)
			}
			for _, cs := range got.ContainerStatuses {
				if cs.Ready {
					t.Errorf("container %s of a Failed pod is ready", cs.Name)
				}
			}
		})
	}
}

func TestRejectedStatusIsFailedWithExitOne(t *testing.T) {
	pod := testPod("a", "uid-a")
	got := ToPodStatus(pod, rejectedStatus(pod, "bad gpu type"), t0)
	if got.Phase != corev1.PodFailed || got.Reason != ReasonRejected || got.Message != "bad gpu type" {
		t.Fatalf("status = %s %s %q", got.Phase, got.Reason, got.Message)
	}
	for _, cs := range got.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 {
			t.Errorf("container %s: %+v", cs.Name, cs.State)
		}
	}
}
