package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDefaultNodeSpec(t *testing.T) {
	o, err := parseFlags([]string{"--nodename", "gpu-burst", "--labels", "zone=burst,tier=b"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := nodeSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"type": "virtual-kubelet", "kubernetes.io/role": "agent",
		"gpucluster.io/node-kind": "virtual", "kubernetes.io/os": "linux", "zone": "burst", "tier": "b"} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	want := corev1.Taint{Key: "virtual-kubelet.io/provider", Value: "gpucluster", Effect: corev1.TaintEffectNoSchedule}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != want {
		t.Errorf("taints = %+v", n.Spec.Taints)
	}
}

func TestEmptyTaintRegistersNone(t *testing.T) {
	o, _ := parseFlags([]string{"--taint", ""})
	n, err := nodeSpec(o)
	if err != nil || len(n.Spec.Taints) != 0 {
		t.Errorf("taints = %+v, %v", n.Spec.Taints, err)
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--poll-interval", "0s"},
		{"--workers", "0"},
		{"extra"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v was accepted", args)
		}
	}
	for _, args := range [][]string{
		{"--taint", "no-effect"},
		{"--taint", "k=v:Sometimes"},
		{"--taint", "bad key=v:NoSchedule"},
		{"--labels", "novalue"},
		{"--labels", "k=bad value"},
		{"--nodename", "Not_A_Name"},
	} {
		o, err := parseFlags(args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if _, err := nodeSpec(o); err == nil {
			t.Errorf("%v was accepted", args)
		}
	}
}

func TestTaintWithoutValue(t *testing.T) {
	got, err := parseTaint("gpucluster.io/burst:PreferNoSchedule")
	if err != nil || got.Key != "gpucluster.io/burst" || got.Value != "" || got.Effect != corev1.TaintEffectPreferNoSchedule {
		t.Errorf("taint = %+v, %v", got, err)
	}
}
