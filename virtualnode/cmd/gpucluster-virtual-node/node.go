package main

import (
	"fmt"
	"runtime"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// nodeSpec is the Node the library registers: our labels and taint, not ready until the library marks it so.
// Capacity is filled in from the provider service.
func nodeSpec(o *options) (*corev1.Node, error) {
	if errs := validation.IsDNS1123Subdomain(o.nodeName); len(errs) > 0 {
		return nil, fmt.Errorf("--nodename %q: %s", o.nodeName, strings.Join(errs, "; "))
	}
	labels := map[string]string{
		"type":                    "virtual-kubelet",
		"kubernetes.io/role":      "agent",
		"kubernetes.io/hostname":  o.nodeName,
		"kubernetes.io/os":        "linux",
		"gpucluster.io/node-kind": "virtual",
	}
	extra, err := parseLabels(o.labels)
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		labels[k] = v
	}
	var taints []corev1.Taint
	if o.taint != "" {
		t, err := parseTaint(o.taint)
		if err != nil {
			return nil, err
		}
		taints = append(taints, t)
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.nodeName, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Phase: corev1.NodePending,
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				Architecture:    runtime.GOARCH,
				KubeletVersion:  "v1.37.1-vk-gpucluster-" + version,
			},
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "the virtual node is starting"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
				condition(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", ""),
			},
		},
	}
	if o.nodeIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: o.nodeIP}}
	}
	return n, nil
}

func condition(kind corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
	now := metav1.Now()
	return corev1.NodeCondition{Type: kind, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now}
}

// parseLabels reads k=v[,k=v...] and checks every key and value.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("--labels: %q is not key=value", pair)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--labels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--labels: value %q of %s: %s", v, k, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

// parseTaint reads key[=value]:Effect.
func parseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("--taint %q: want key[=value]:Effect", s)
	}
	k, v, _ := strings.Cut(kv, "=")
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("--taint %q: key: %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return corev1.Taint{}, fmt.Errorf("--taint %q: value: %s", s, strings.Join(errs, "; "))
	}
	switch e := corev1.TaintEffect(effect); e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return corev1.Taint{Key: k, Value: v, Effect: e}, nil
	default:
		return corev1.Taint{}, fmt.Errorf("--taint %q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
}
