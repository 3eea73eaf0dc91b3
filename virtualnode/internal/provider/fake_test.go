package provider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeService speaks the provider service API of docs/burst-provider-api.md from an in-memory table.
type fakeService struct {
	mu        sync.Mutex
	statuses  map[string]PodStatus // namespace/name -> status
	reject    string               // when set, POST /v1/pods answers 422 with this error
	posts     int
	posted    []corev1.Pod // each pod POSTed, as sent
	deletes   []string     // "namespace/name?uid" of each DELETE
	capacity  map[string]string
	unhealthy bool
	drain     float64 // when set, DELETE keeps the pod listed (draining) and answers drainSeconds
}

func newFakeService(t *testing.T) (*fakeService, *httptest.Server) {
	t.Helper()
	f := &fakeService{statuses: map[string]PodStatus{}, capacity: map[string]string{"nvidia.com/gpu": "16", "cpu": "512", "memory": "4Ti", "pods": "110"}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeService) set(s PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[s.Namespace+"/"+s.Name] = s
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		if f.unhealthy {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "rebuilding state"})
			return
		}
		_, _ = w.Write([]byte("ok"))
	case r.Method == http.MethodGet && r.URL.Path == "/v1/capacity":
		writeJSON(w, http.StatusOK, f.capacity)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/pods":
		f.posts++
		if f.reject != "" {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": f.reject})
			return
		}
		var body struct {
			Pod corev1.Pod `json:"pod"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Pod.Name == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body is not {\"pod\": <pod>}"})
			return
		}
		f.posted = append(f.posted, body.Pod)
		k := body.Pod.Namespace + "/" + body.Pod.Name
		s, ok := f.statuses[k]
		if !ok || s.UID != string(body.Pod.UID) {
			s = PodStatus{Namespace: body.Pod.Namespace, Name: body.Pod.Name, UID: string(body.Pod.UID),
				Phase: "Pending", Reason: "ProviderCreating", Message: "choosing a provider"}
			f.statuses[k] = s
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"status": s})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/pods":
		pods := []PodStatus{}
		for _, s := range f.statuses {
			pods = append(pods, s)
		}
		writeJSON(w, http.StatusOK, map[string]any{"pods": pods})
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/pods/"):
		k := strings.TrimPrefix(r.URL.Path, "/v1/pods/")
		f.deletes = append(f.deletes, k+"?"+r.URL.Query().Get("uid"))
		if _, ok := f.statuses[k]; !ok {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown pod " + k})
			return
		}
		if f.drain > 0 {
			writeJSON(w, http.StatusOK, map[string]any{"deleted": true, "drainSeconds": f.drain})
			return
		}
		delete(f.statuses, k)
		writeJSON(w, http.StatusOK, map[string]any{"deleted": true, "drainSeconds": 0})
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/logs"):
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("container=" + r.URL.Query().Get("container") + " tail=" + r.URL.Query().Get("tail") + "\n"))
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no route " + r.Method + " " + r.URL.Path})
	}
}

// testPod is a ReplicaSet-style pod with two containers.
func testPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{
			NodeName: "gpu-burst",
			Containers: []corev1.Container{
				{Name: "server", Image: "example/server:1"},
				{Name: "sidecar", Image: "example/sidecar:1"},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
