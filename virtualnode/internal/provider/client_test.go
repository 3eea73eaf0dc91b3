package provider

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestNewClientRejectsURLWithoutScheme(t *testing.T) {
	if _, err := NewClient("127.0.0.1:10299", time.Second); err == nil {
		t.Fatal("a URL without scheme was accepted")
	}
	if _, err := NewClient("http://127.0.0.1:10299/", time.Second); err != nil {
		t.Fatalf("a valid URL was refused: %v", err)
	}
}

func TestClientSpeaksTheDocumentedAPI(t *testing.T) {
	f, srv := newFakeService(t)
	c, err := NewClient(srv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if err := c.Healthy(ctx); err != nil {
		t.Fatalf("healthz: %v", err)
	}
	f.unhealthy = true
	if err := c.Healthy(ctx); err == nil {
		t.Fatal("an unhealthy service was reported healthy")
	}

	capacity, err := c.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := capacity["nvidia.com/gpu"]; got.Value() != 16 {
		t.Errorf("nvidia.com/gpu = %s, want 16", got.String())
	}
	if got := capacity[corev1.ResourceMemory]; got.String() != "4Ti" {
		t.Errorf("memory = %s, want 4Ti", got.String())
	}

	pod := testPod("a", "uid-a")
	status, err := c.CreatePod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if status.Phase != "Pending" || status.UID != "uid-a" {
		t.Errorf("create answered %+v", status)
	}
	pods, err := c.ListPods(ctx)
	if err != nil || len(pods) != 1 || pods[0].Name != "a" {
		t.Fatalf("list = %+v, %v", pods, err)
	}

	if drain, err := c.DeletePod(ctx, "inference", "a", "uid-a"); err != nil || drain != 0 {
		t.Fatal(drain, err)
	}
	if _, err := c.DeletePod(ctx, "inference", "a", "uid-a"); err != nil {
		t.Fatalf("a 404 on delete must count as deleted: %v", err)
	}
	if len(f.deletes) != 2 || f.deletes[0] != "inference/a?uid-a" {
		t.Errorf("deletes = %v", f.deletes)
	}

	rc, err := c.Logs(ctx, "inference", "a", "server", 20)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	if string(data) != "container=server tail=20\n" {
		t.Errorf("logs = %q", data)
	}
}

func TestClientErrorsCarryTheServiceMessage(t *testing.T) {
	f, srv := newFakeService(t)
	f.reject = "gpu type B200 is offered by no provider"
	c, _ := NewClient(srv.URL, time.Second)
	_, err := c.CreatePod(context.Background(), testPod("a", "uid-a"))
	if !IsRejected(err) {
		t.Fatalf("a 422 is not reported as rejected: %v", err)
	}
	if got := err.Error(); got != "provider service POST /v1/pods: HTTP 422: gpu type B200 is offered by no provider" {
		t.Errorf("error = %q", got)
	}
}

func TestServerErrorsAndBadCapacityAreNotRejections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/capacity" {
			_, _ = w.Write([]byte(`{"nvidia.com/gpu": "lots"}`))
			return
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, time.Second)
	if _, err := c.CreatePod(context.Background(), testPod("a", "uid-a")); err == nil || IsRejected(err) {
		t.Errorf("a 500 must be an error but not a rejection: %v", err)
	}
	if _, err := c.Capacity(context.Background()); err == nil {
		t.Error("a capacity that is not a quantity was accepted")
	}
}
