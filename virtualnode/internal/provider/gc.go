package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// CollectReplaced deletes the Failed pods on nodeName that nothing needs any more: either their replacement
// exists (another pod of the same controller that is neither terminating nor Failed and was created no earlier
// than the Failed one; timestamps have one-second resolution, so a replacement made in the same second counts),
// or their controller is a ReplicaSet that has as many live pods as it wants, or is gone. The second rule is
// what a rollout needs: the old ReplicaSet of a Deployment rolled elsewhere is scaled to zero, so nothing of
// its own replaces its Failed pods, and the ReplicaSet controller never deletes Failed pods. Pods without a
// controller are left alone: nothing would replace them. It returns the namespace/name of each deleted pod.
func CollectReplaced(ctx context.Context, client kubernetes.Interface, nodeName string, metrics *Metrics) ([]string, error) {
	onNode, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", nodeName, err)
	}
	siblings := map[string][]corev1.Pod{} // namespace -> its pods, listed once per pass
	var deleted []string
	for i := range onNode.Items {
		failed := &onNode.Items[i]
		owner := metav1.GetControllerOf(failed)
		if failed.Spec.NodeName != nodeName || failed.Status.Phase != corev1.PodFailed ||
			failed.DeletionTimestamp != nil || owner == nil {
			continue
		}
		pods, ok := siblings[failed.Namespace]
		if !ok {
			list, err := client.CoreV1().Pods(failed.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return deleted, fmt.Errorf("listing the pods of namespace %s: %w", failed.Namespace, err)
			}
			pods = list.Items
			siblings[failed.Namespace] = pods
		}
		done, err := ownerDone(ctx, client, failed, owner, pods)
		if err != nil {
			return deleted, err
		}
		if !done && !hasReplacement(failed, owner, pods) {
			continue
		}
		uid := failed.UID
		err = client.CoreV1().Pods(failed.Namespace).Delete(ctx, failed.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return deleted, fmt.Errorf("deleting the Failed pod %s/%s: %w", failed.Namespace, failed.Name, err)
		}
		if metrics != nil {
			metrics.Collected.Inc()
		}
		deleted = append(deleted, failed.Namespace+"/"+failed.Name)
	}
	return deleted, nil
}

// ownerDone reports whether failed's ReplicaSet is gone (or is another object of the same name now) or has as
// many live pods as spec.replicas asks for. Other controllers, and a ReplicaSet it may not read, report false:
// the replacement rule alone decides for them.
func ownerDone(ctx context.Context, client kubernetes.Interface, failed *corev1.Pod, owner *metav1.OwnerReference,
	pods []corev1.Pod) (bool, error) {
	if owner.Kind != "ReplicaSet" || owner.APIVersion != "apps/v1" {
		return false, nil
	}
	rs, err := client.AppsV1().ReplicaSets(failed.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading ReplicaSet %s/%s of the Failed pod %s: %w", failed.Namespace, owner.Name,
			failed.Name, err)
	}
	if rs.UID != owner.UID {
		return true, nil
	}
	want := int32(1)
	if rs.Spec.Replicas != nil {
		want = *rs.Spec.Replicas
	}
	live := int32(0)
	for i := range pods {
		other := &pods[i]
		if other.UID == failed.UID || other.DeletionTimestamp != nil || other.Status.Phase == corev1.PodFailed ||
			other.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if o := metav1.GetControllerOf(other); o != nil && o.UID == owner.UID {
			live++
		}
	}
	return live >= want, nil
}

// hasReplacement reports whether pods holds a live pod of owner created no earlier than failed.
func hasReplacement(failed *corev1.Pod, owner *metav1.OwnerReference, pods []corev1.Pod) bool {
	for i := range pods {
		other := &pods[i]
		if other.UID == failed.UID || other.DeletionTimestamp != nil || other.Status.Phase == corev1.PodFailed {
			continue
		}
		if o := metav1.GetControllerOf(other); o == nil || o.UID != owner.UID {
			continue
		}
		if !other.CreationTimestamp.Before(&failed.CreationTimestamp) {
			return true
		}
	}
	return false
}

// RunCollector calls CollectReplaced every interval until ctx ends, logging what it deletes and any error.
func RunCollector(ctx context.Context, client kubernetes.Interface, nodeName string, interval time.Duration, metrics *Metrics) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		deleted, err := CollectReplaced(ctx, client, nodeName, metrics)
		for _, name := range deleted {
			log.G(ctx).WithField("pod", name).Info("deleted a Failed pod nothing needs (replaced, or its ReplicaSet has all it wants)")
		}
		if err != nil && ctx.Err() == nil {
			log.G(ctx).WithError(err).Warn("collecting replaced Failed pods failed; will retry")
		}
	}
}
