package main

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// libraryClient is the kubernetes.Interface handed to the virtual-kubelet library as its client: everything goes
// to the real API server except Secrets, ConfigMaps and Services, which are served by empty in-memory clients.
//
// Why (least privilege): nodeutil.NewNode (virtual-kubelet v1.14.1, node/nodeutil/controller.go lines 350-361)
// always builds a second, cluster-wide SharedInformerFactory on cfg.Client and asks it for Secret, ConfigMap and
// Service informers; Node.Run starts that factory (same file, line 117). With the real client this would need
// cluster-wide list/watch of every Secret, which we refuse to grant; without the grant the reflectors log a
// "forbidden ... at the cluster scope" error every second. The only reader of those listers is the library's
// environment resolution (internal/podutils/env.go), which SkipDownwardAPIResolution turns off (see run): the
// provider service resolves env references itself with Roles limited to the inference namespaces. So the
// informers may as well sync empty, from memory, without ever calling the API server.
//
// Pods, Nodes, Events, Leases and everything else keep the real client. Our own code (the collector of replaced
// Failed pods) is given the real client directly, not this wrapper.
type libraryClient struct {
	kubernetes.Interface
	empty kubernetes.Interface
}

// newLibraryClient wraps apiClient as described on libraryClient.
func newLibraryClient(apiClient kubernetes.Interface) *libraryClient {
	return &libraryClient{Interface: apiClient, empty: fake.NewClientset()}
}

// CoreV1 returns the real core/v1 client with Secrets, ConfigMaps and Services swapped for the empty ones.
func (c *libraryClient) CoreV1() typedcorev1.CoreV1Interface {
	return &libraryCoreV1{CoreV1Interface: c.Interface.CoreV1(), empty: c.empty.CoreV1()}
}

// IsWatchListSemanticsUnSupported tells client-go's reflectors (util/watchlist, consulted by every informer built
// on this client) to use plain LIST then WATCH instead of the streaming watch-list. The in-memory Secret,
// ConfigMap and Service clients cannot stream the initial events a watch-list waits for, and client-go can only
// ask this of the whole client, so the pod informer on the real API server uses LIST then WATCH as well (it lists
// only the pods bound to this node, so the difference is small).
func (c *libraryClient) IsWatchListSemanticsUnSupported() bool {
	return true
}

// libraryCoreV1 is the core/v1 half of libraryClient.
type libraryCoreV1 struct {
	typedcorev1.CoreV1Interface
	empty typedcorev1.CoreV1Interface
}

// Secrets never reaches the API server: the node reads no Secret.
func (c *libraryCoreV1) Secrets(namespace string) typedcorev1.SecretInterface {
	return c.empty.Secrets(namespace)
}

// ConfigMaps never reaches the API server: the node reads no ConfigMap.
func (c *libraryCoreV1) ConfigMaps(namespace string) typedcorev1.ConfigMapInterface {
	return c.empty.ConfigMaps(namespace)
}

// Services never reaches the API server: the node injects no service environment variables.
func (c *libraryCoreV1) Services(namespace string) typedcorev1.ServiceInterface {
	return c.empty.Services(namespace)
}
