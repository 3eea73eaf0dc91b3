package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// forbiddenPath matches every URL through which Secrets, ConfigMaps or Services could be read, cluster-wide or
// in one namespace.
var forbiddenPath = regexp.MustCompile(`^/api/v1/(namespaces/[^/]+/)?(secrets|configmaps|services)(/|$)`)

// podsPath matches pod lists, cluster-wide or in one namespace.
var podsPath = regexp.MustCompile(`^/api/v1/(namespaces/[^/]+/)?pods$`)

// fakeAPIServer answers pod lists with one pod, fails the test on any Secret/ConfigMap/Service request, and
// counts the pod requests it served.
func fakeAPIServer(t *testing.T) (kubernetes.Interface, *atomic.Int64) {
	t.Helper()
	var podRequests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case forbiddenPath.MatchString(r.URL.Path):
			t.Errorf("the API server got a request it must never get: %s %s", r.Method, r.URL)
			http.Error(w, "forbidden", http.StatusForbidden)
		case podsPath.MatchString(r.URL.Path) && r.URL.Query().Get("watch") == "":
			podRequests.Add(1)
			list := corev1.PodList{
				TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items:    []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "inference"}}},
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(list)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	apiClient, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return apiClient, &podRequests
}

func TestLibraryClientListsNoSecretsConfigMapsOrServices(t *testing.T) {
	apiClient, _ := fakeAPIServer(t)
	core := newLibraryClient(apiClient).CoreV1()
	ctx := context.Background()
	for _, ns := range []string{metav1.NamespaceAll, "inference"} {
		secrets, err := core.Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(secrets.Items) != 0 {
			t.Errorf("Secrets(%q).List = %d items, %v; want 0, nil", ns, len(secrets.Items), err)
		}
		configMaps, err := core.ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(configMaps.Items) != 0 {
			t.Errorf("ConfigMaps(%q).List = %d items, %v; want 0, nil", ns, len(configMaps.Items), err)
		}
		services, err := core.Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(services.Items) != 0 {
			t.Errorf("Services(%q).List = %d items, %v; want 0, nil", ns, len(services.Items), err)
		}
	}
}

// The library builds exactly these informers on its client (nodeutil.NewNode); they must sync empty. This also
// covers IsWatchListSemanticsUnSupported: without it the reflectors wait for a watch-list the in-memory clients
// never finish, and the informers never sync.
func TestLibraryInformersSyncEmptyWithoutTheAPIServer(t *testing.T) {
	apiClient, _ := fakeAPIServer(t)
	factory := informers.NewSharedInformerFactory(newLibraryClient(apiClient), time.Minute)
	secrets := factory.Core().V1().Secrets()
	configMaps := factory.Core().V1().ConfigMaps()
	services := factory.Core().V1().Services()
	synced := []cache.InformerSynced{
		secrets.Informer().HasSynced, configMaps.Informer().HasSynced, services.Informer().HasSynced,
	}
	// The deadline only bounds a broken run; a healthy one syncs at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		t.Fatal("the Secret, ConfigMap and Service informers did not sync")
	}
	for name, n := range map[string]func() (int, error){
		"secrets":    func() (int, error) { l, err := secrets.Lister().List(labels.Everything()); return len(l), err },
		"configmaps": func() (int, error) { l, err := configMaps.Lister().List(labels.Everything()); return len(l), err },
		"services":   func() (int, error) { l, err := services.Lister().List(labels.Everything()); return len(l), err },
	} {
		if count, err := n(); err != nil || count != 0 {
			t.Errorf("%s lister = %d, %v; want 0, nil", name, count, err)
		}
	}
}

func TestLibraryClientPodsReachTheAPIServer(t *testing.T) {
	apiClient, podRequests := fakeAPIServer(t)
	pods, err := newLibraryClient(apiClient).CoreV1().Pods("inference").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("Pods.List: %v", err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "web-0" {
		t.Errorf("Pods.List = %+v, want the API server's pod web-0", pods.Items)
	}
	if podRequests.Load() != 1 {
		t.Errorf("the API server served %d pod lists, want 1", podRequests.Load())
	}
}

// A request the wrapper does not intercept must still fail through the real client: the test server proves the
// wrapper is not silently swallowing other resources.
func TestLibraryClientOtherResourcesUseTheRealClient(t *testing.T) {
	apiClient, _ := fakeAPIServer(t)
	_, err := newLibraryClient(apiClient).CoreV1().Nodes().Get(context.Background(), "gpu-burst", metav1.GetOptions{})
	if err == nil {
		t.Error("Nodes().Get succeeded; want the test API server's 404 through the real client")
	}
}
