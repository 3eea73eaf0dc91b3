package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// PodStatus is the provider service's view of one pod (docs/burst-provider-api.md, "PodStatus").
type PodStatus struct {
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	UID        string            `json:"uid"`
	Phase      string            `json:"phase"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	Provider   string            `json:"provider,omitempty"`
	InstanceID string            `json:"instanceId,omitempty"`
	GPUType    string            `json:"gpuType,omitempty"`
	Address    string            `json:"address,omitempty"`
	Ports      []Port            `json:"ports,omitempty"`
	StartTime  *time.Time        `json:"startTime,omitempty"`
	Containers []ContainerStatus `json:"containers,omitempty"`
}

// Port is one port the external instance exposes.
type Port struct {
	Name     string `json:"name,omitempty"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}

// ContainerStatus is the service's view of one container of a pod.
type ContainerStatus struct {
	Name         string     `json:"name"`
	Image        string     `json:"image,omitempty"`
	State        string     `json:"state"`
	Reason       string     `json:"reason,omitempty"`
	Message      string     `json:"message,omitempty"`
	ExitCode     *int32     `json:"exitCode,omitempty"`
	StartedAt    *time.Time `json:"startedAt,omitempty"`
	FinishedAt   *time.Time `json:"finishedAt,omitempty"`
	RestartCount int32      `json:"restartCount,omitempty"`
	// Ready and Started are the container's probe results against the rented instance (a running container is
	// not ready until its readiness probe passes there); absent, a running container counts as both.
	Ready   *bool `json:"ready,omitempty"`
	Started *bool `json:"started,omitempty"`
}

// APIError is a non-2xx answer of the service; Code tells a rejected request (4xx) from a failing service (5xx).
type APIError struct {
	Method, Path string
	Code         int
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("provider service %s %s: HTTP %d: %s", e.Method, e.Path, e.Code, e.Message)
}

// IsRejected reports whether err is a 4xx answer: the request itself is wrong and retrying it cannot help.
func IsRejected(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != http.StatusNotFound
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusNotFound
}

// Client speaks the provider service's loopback HTTP/JSON API.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for the service at baseURL (e.g. http://127.0.0.1:10299).
func NewClient(baseURL string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider URL %q is not an http(s) URL with a host", baseURL)
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: timeout}}, nil
}

// do sends one request and decodes a 2xx JSON answer into out (when out is not nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding the body of %s %s: %w", method, path, err)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return fmt.Errorf("building %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &APIError{Method: method, Path: path, Code: resp.StatusCode, Message: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// CreatePod hands the whole pod to the service; it answers at once with the pod's current status.
func (c *Client) CreatePod(ctx context.Context, pod *corev1.Pod) (*PodStatus, error) {
	var out struct {
		Status *PodStatus `json:"status"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/pods", map[string]any{"pod": pod}, &out); err != nil {
		return nil, err
	}
	return out.Status, nil
}

// ListPods returns every pod the service is responsible for.
func (c *Client) ListPods(ctx context.Context) ([]PodStatus, error) {
	var out struct {
		Pods []PodStatus `json:"pods"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/pods", nil, &out); err != nil {
		return nil, err
	}
	return out.Pods, nil
}

// DeletePod asks the service to delete the pod's instance; a pod it does not know counts as deleted.
func (c *Client) DeletePod(ctx context.Context, namespace, name, uid string) (drain time.Duration, err error) {
	path := fmt.Sprintf("/v1/pods/%s/%s?uid=%s", url.PathEscape(namespace), url.PathEscape(name), url.QueryEscape(uid))
	var out struct {
		DrainSeconds float64 `json:"drainSeconds"`
	}
	err = c.do(ctx, http.MethodDelete, path, nil, &out)
	if IsNotFound(err) {
		return 0, nil
	}
	if err != nil || out.DrainSeconds <= 0 {
		return 0, err
	}
	return time.Duration(out.DrainSeconds * float64(time.Second)), nil
}

// Logs returns the tail of a container's log as the service relays it.
func (c *Client) Logs(ctx context.Context, namespace, name, container string, tail int) (io.ReadCloser, error) {
	q := url.Values{"container": {container}}
	if tail > 0 {
		q.Set("tail", fmt.Sprint(tail))
	}
	path := fmt.Sprintf("/v1/pods/%s/%s/logs?%s", url.PathEscape(namespace), url.PathEscape(name), q.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		return nil, &APIError{Method: http.MethodGet, Path: path, Code: resp.StatusCode, Message: strings.TrimSpace(string(data))}
	}
	return resp.Body, nil
}

// Capacity returns what the node advertises: each value is a Kubernetes quantity.
func (c *Client) Capacity(ctx context.Context) (corev1.ResourceList, error) {
	var raw map[string]string
	if err := c.do(ctx, http.MethodGet, "/v1/capacity", nil, &raw); err != nil {
		return nil, err
	}
	out := corev1.ResourceList{}
	for name, value := range raw {
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("capacity %q = %q from the provider service is not a quantity: %w", name, value, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// Healthy reports whether GET /healthz answers 200 (the service has rebuilt its state).
func (c *Client) Healthy(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil)
}
