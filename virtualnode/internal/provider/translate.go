package provider

import (
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons the node itself sets (the service's reasons are copied as they are).
const (
	// ReasonRejected: the service answered the create with a 4xx, so the pod can never run here.
	ReasonRejected = "ProviderRejected"
	// ReasonDeleted: the pod was deleted and its instance released.
	ReasonDeleted = "ProviderDeleted"
	// defaultFailedExitCode is what a container of a failed pod reports when the service names none.
	defaultFailedExitCode int32 = 137
	// rejectedExitCode is a refused create's exit code, as the service uses for ProviderCreateFailed.
	rejectedExitCode int32 = 1
)

// ToPodStatus turns the service's status of pod into the status the API server gets. Every container of the
// pod's spec gets a status: the service's when it reports one, else one derived from the pod's phase, so a
// Failed pod never has a container that still looks alive.
func ToPodStatus(pod *corev1.Pod, s *PodStatus, now time.Time) corev1.PodStatus {
	phase := corev1.PodPhase(s.Phase)
	switch phase {
	case corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
	default:
		phase = corev1.PodPending
	}
	out := corev1.PodStatus{
		Phase:   phase,
		Reason:  s.Reason,
		Message: s.Message,
	}
	if ip := net.ParseIP(s.Address); ip != nil {
		out.PodIP = ip.String()
		out.PodIPs = []corev1.PodIP{{IP: out.PodIP}}
	}
	if s.StartTime != nil {
		t := metav1.NewTime(*s.StartTime)
		out.StartTime = &t
	} else if pod.Status.StartTime != nil {
		out.StartTime = pod.Status.StartTime.DeepCopy()
	}
	reported := map[string]ContainerStatus{}
	for _, c := range s.Containers {
		reported[c.Name] = c
	}
	var unready []string
	for _, spec := range pod.Spec.Containers {
		c, ok := reported[spec.Name]
		if !ok {
			c = ContainerStatus{Name: spec.Name, State: defaultState(phase)}
		}
		cs := containerStatus(spec, c, phase, s, now)
		if !cs.Ready {
			unready = append(unready, spec.Name)
		}
		out.ContainerStatuses = append(out.ContainerStatuses, cs)
	}
	out.Conditions = conditions(phase, len(pod.Spec.Containers) > 0 && len(unready) == 0, unready, now)
	return out
}

// defaultState is a container's state when the service reports none for it.
func defaultState(phase corev1.PodPhase) string {
	switch phase {
	case corev1.PodRunning:
		return "running"
	case corev1.PodFailed, corev1.PodSucceeded:
		return "terminated"
	default:
		return "waiting"
	}
}

// containerStatus builds one container's status. In a Failed pod every container is terminated whatever the
// service says about it (the failure rule), with the service's exit code or 137.
func containerStatus(spec corev1.Container, c ContainerStatus, phase corev1.PodPhase, s *PodStatus, now time.Time) corev1.ContainerStatus {
	image := c.Image
	if image == "" {
		image = spec.Image
	}
	cs := corev1.ContainerStatus{Name: spec.Name, Image: image, ImageID: image, RestartCount: c.RestartCount}
	state := c.State
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		state = "terminated"
	}
	switch state {
	case "running":
		started := metav1.NewTime(timeOr(c.StartedAt, s.StartTime, now))
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: started}
		running := phase == corev1.PodRunning
		cs.Ready = running && (c.Ready == nil || *c.Ready)
		startedOK := running && (c.Started == nil || *c.Started)
		cs.Started = &startedOK
	case "terminated":
		exit := int32(0)
		if c.ExitCode != nil {
			exit = *c.ExitCode
		} else if phase == corev1.PodFailed {
			exit = defaultFailedExitCode
		}
		reason, message := c.Reason, c.Message
		if phase == corev1.PodFailed && reason == "" {
			reason, message = s.Reason, s.Message
		}
		if reason == "" {
			reason = map[bool]string{true: "Completed", false: "Error"}[exit == 0]
		}
		cs.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:   exit,
			Reason:     reason,
			Message:    message,
			StartedAt:  metav1.NewTime(timeOr(c.StartedAt, s.StartTime, time.Time{})),
			FinishedAt: metav1.NewTime(timeOr(c.FinishedAt, nil, now)),
		}
		started := false
		cs.Started = &started
	default:
		reason := c.Reason
		if reason == "" {
			reason = s.Reason
		}
		if reason == "" {
			reason = "ContainerCreating"
		}
		message := c.Message
		if message == "" {
			message = s.Message
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: message}
		started := false
		cs.Started = &started
	}
	return cs
}

// timeOr returns the first of a, b that is set, else fallback.
func timeOr(a, b *time.Time, fallback time.Time) time.Time {
	if a != nil {
		return *a
	}
	if b != nil {
		return *b
	}
	return fallback
}

// conditions are the four pod conditions a kubelet reports, derived from the phase and container readiness. A
// running pod that is not ready says which containers, with the kubelet's reason and message.
func conditions(phase corev1.PodPhase, allReady bool, unready []string, now time.Time) []corev1.PodCondition {
	t := metav1.NewTime(now.Truncate(time.Second))
	running := phase == corev1.PodRunning
	ready := running && allReady
	initialized := phase != corev1.PodPending
	cond := func(kind corev1.PodConditionType, ok bool) corev1.PodCondition {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		return corev1.PodCondition{Type: kind, Status: status, LastTransitionTime: t}
	}
	containersReady, podReady := cond(corev1.ContainersReady, ready), cond(corev1.PodReady, ready)
	if running && !ready {
		message := fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
		containersReady.Reason, containersReady.Message = "ContainersNotReady", message
		podReady.Reason, podReady.Message = "ContainersNotReady", message
	}
	return []corev1.PodCondition{cond(corev1.PodScheduled, true), cond(corev1.PodInitialized, initialized),
		containersReady, podReady}
}

// rejectedStatus is what the node reports for a pod the service refused with a 4xx: Failed, never Pending.
func rejectedStatus(pod *corev1.Pod, message string) *PodStatus {
	exit := rejectedExitCode
	s := &PodStatus{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Phase: string(corev1.PodFailed),
		Reason: ReasonRejected, Message: message}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, ContainerStatus{Name: c.Name, Image: c.Image, State: "terminated",
			Reason: ReasonRejected, Message: message, ExitCode: &exit})
	}
	return s
}

// deletedStatus is the terminal status reported once a pod's instance is deleted: Failed pods stay Failed,
// anything else ends Succeeded, and every container is terminated so the library can finish the deletion.
func deletedStatus(pod *corev1.Pod, last *PodStatus) *PodStatus {
	if last != nil && last.Phase == string(corev1.PodFailed) {
		return last
	}
	exit := int32(0)
	s := &PodStatus{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID), Phase: string(corev1.PodSucceeded),
		Reason: ReasonDeleted, Message: "the pod was deleted and its external instance released"}
	if last != nil {
		s.Address, s.StartTime = last.Address, last.StartTime
	}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, ContainerStatus{Name: c.Name, Image: c.Image, State: "terminated",
			Reason: ReasonDeleted, ExitCode: &exit})
	}
	return s
}
