package provider

import (
	"context"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// replicaSet is ReplicaSet name (uid "uid-"+name) in the inference namespace, wanting replicas pods.
func replicaSet(name string, replicas int32) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "inference", UID: types.UID("uid-" + name)},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr(replicas)},
	}
}

// rsPod is a pod of ReplicaSet rs created at t0+offset.
func rsPod(name, rs, node string, phase corev1.PodPhase, offset time.Duration) *corev1.Pod {
	p := testPod(name, "uid-"+name)
	p.Spec.NodeName = node
	p.Status.Phase = phase
	p.CreationTimestamp = metav1.NewTime(t0.Add(offset))
	if rs != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
			UID: types.UID("uid-" + rs), Controller: ptr(true)}}
	}
	return p
}

func remaining(t *testing.T, objs ...runtime.Object) ([]string, []string) {
	t.Helper()
	client := fake.NewClientset(objs...)
	deleted, err := CollectReplaced(context.Background(), client, "gpu-burst", NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return deleted, names
}

func TestFailedPodIsDeletedOnceItsReplacementExists(t *testing.T) {
	deleted, left := remaining(t, replicaSet("rs1", 1),
		rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0),
		rsPod("replacement", "rs1", "node-1", corev1.PodPending, time.Second))
	if len(deleted) != 1 || deleted[0] != "inference/failed" {
		t.Fatalf("deleted = %v", deleted)
	}
	if len(left) != 1 || left[0] != "replacement" {
		t.Errorf("left = %v", left)
	}
}

func TestReplacementCreatedInTheSameSecondCounts(t *testing.T) {
	deleted, _ := remaining(t, replicaSet("rs1", 2),
		rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0),
		rsPod("other", "rs1", "node-1", corev1.PodRunning, -time.Second),
		rsPod("replacement", "rs1", "gpu-burst", corev1.PodRunning, 0))
	if len(deleted) != 1 {
		t.Errorf("deleted = %v", deleted)
	}
}

func TestFailedPodIsKeptWithoutAReplacement(t *testing.T) {
	terminating := rsPod("terminating", "rs1", "node-1", corev1.PodRunning, time.Second)
	terminating.DeletionTimestamp = ptr(metav1.NewTime(t0.Add(time.Minute)))
	terminating.Finalizers = []string{"example.com/hold"}
	cases := map[string][]runtime.Object{
		"no other pod":             {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0)},
		"the other pod is older":   {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0), rsPod("older", "rs1", "node-1", corev1.PodRunning, -time.Second)},
		"the other pod failed":     {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0), rsPod("also-failed", "rs1", "gpu-burst", corev1.PodFailed, time.Second)},
		"the other is terminating": {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0), terminating},
		"another controller":       {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0), rsPod("foreign", "rs2", "node-1", corev1.PodRunning, time.Second)},
		"no controller owner":      {rsPod("failed", "", "gpu-burst", corev1.PodFailed, 0), rsPod("other", "", "node-1", corev1.PodRunning, time.Second)},
		"failed on another node":   {rsPod("failed", "rs1", "node-1", corev1.PodFailed, 0), rsPod("replacement", "rs1", "gpu-burst", corev1.PodRunning, time.Second)},
		"not failed":               {rsPod("running", "rs1", "gpu-burst", corev1.PodRunning, 0), rsPod("newer", "rs1", "gpu-burst", corev1.PodRunning, time.Second)},
	}
	for name, objs := range cases {
		t.Run(name, func(t *testing.T) {
			// Each ReplicaSet wants more pods than it has live: only a replacement could free the Failed one.
			deleted, left := remaining(t, append(objs, replicaSet("rs1", 2), replicaSet("rs2", 2))...)
			if len(deleted) != 0 || len(left) != len(objs) {
				t.Errorf("deleted = %v, left = %v", deleted, left)
			}
		})
	}
}

func TestFailedPodOfAReplicaSetThatHasAllItWantsIsDeleted(t *testing.T) {
	gone := replicaSet("rs1", 1)
	gone.UID = "uid-of-a-newer-rs1"
	cases := map[string][]runtime.Object{
		// A Deployment rolled elsewhere: its old ReplicaSet is at zero, nothing of its own will replace the pod.
		"scaled to zero": {replicaSet("rs1", 0), rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0)},
		"as many live as it wants": {replicaSet("rs1", 1), rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0),
			rsPod("older", "rs1", "node-1", corev1.PodRunning, -time.Second)},
		"the ReplicaSet is gone":          {rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0)},
		"another object of the same name": {gone, rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0)},
	}
	for name, objs := range cases {
		t.Run(name, func(t *testing.T) {
			deleted, _ := remaining(t, objs...)
			if len(deleted) != 1 || deleted[0] != "inference/failed" {
				t.Errorf("deleted = %v", deleted)
			}
		})
	}
}

func TestAReplicaSetItMayNotReadLeavesTheReplacementRuleAlone(t *testing.T) {
	client := fake.NewClientset(replicaSet("rs1", 0), rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0))
	client.PrependReactor("get", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "rs1", nil)
	})
	deleted, err := CollectReplaced(context.Background(), client, "gpu-burst", NewMetrics())
	if err != nil || len(deleted) != 0 {
		t.Errorf("deleted = %v, err = %v", deleted, err)
	}
}

func TestAnErrorReadingTheReplicaSetIsReturned(t *testing.T) {
	client := fake.NewClientset(replicaSet("rs1", 0), rsPod("failed", "rs1", "gpu-burst", corev1.PodFailed, 0))
	client.PrependReactor("get", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	if _, err := CollectReplaced(context.Background(), client, "gpu-burst", NewMetrics()); err == nil {
		t.Error("want the error")
	}
}
