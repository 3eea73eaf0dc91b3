package metricsadapter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierr "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// table answers queries from a map; a query it does not hold is an error.
type table map[string]struct {
	sample Sample
	err    error
}

func (t table) Query(_ context.Context, q string) (Sample, error) {
	a, ok := t[q]
	if !ok {
		return Sample{}, errors.New("unexpected query " + q)
	}
	return a.sample, a.err
}

const sdQuery = `sum(rate(requests_total{namespace="inference",service="sd-serve"}[30s]))`

func newTestProvider(t *testing.T, src table) *Provider {
	t.Helper()
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	mapper := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Service"}, apimeta.RESTScopeNamespace)
	return NewProvider(c, src, mapper, nil)
}

var servicesInfo = provider.CustomMetricInfo{
	GroupResource: schema.GroupResource{Resource: "services"}, Namespaced: true, Metric: "requests_per_second",
}

func TestAServicesRequestRateIsItsMetric(t *testing.T) {
	at := time.Date(2026, 12, 3, 20, 0, 0, 0, time.UTC)
	p := newTestProvider(t, table{sdQuery: {sample: Sample{Value: 42.5, Time: at}}})
	v, err := p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "inference", Name: "sd-serve"}, servicesInfo, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if v.Value.MilliValue() != 42500 {
		t.Fatalf("value %s, want 42500m", v.Value.String())
	}
	if v.DescribedObject.Kind != "Service" || v.DescribedObject.Name != "sd-serve" || v.DescribedObject.Namespace != "inference" {
		t.Fatalf("described object %+v", v.DescribedObject)
	}
	if !v.Timestamp.Time.Equal(at) || v.Metric.Name != "requests_per_second" {
		t.Fatalf("timestamp %v, metric %q", v.Timestamp, v.Metric.Name)
	}
	got := p.ListAllMetrics()
	if len(got) != 1 || got[0] != servicesInfo {
		t.Fatalf("ListAllMetrics %+v", got)
	}
}

func TestNoValueIsNotFoundAndAFailureIsUnavailable(t *testing.T) {
	p := newTestProvider(t, table{
		sdQuery: {err: ErrNoSample},
		`sum(rate(requests_total{namespace="inference",service="down"}[30s]))`: {err: errors.New("connection refused")},
	})
	ctx := context.Background()
	_, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "inference", Name: "sd-serve"}, servicesInfo, labels.Everything())
	if !apierr.IsNotFound(err) {
		t.Fatalf("no sample gave %v, want NotFound (the HPA keeps its count)", err)
	}
	_, err = p.GetMetricByName(ctx, types.NamespacedName{Namespace: "inference", Name: "down"}, servicesInfo, labels.Everything())
	if !apierr.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a failed query gave %v, want ServiceUnavailable naming the cause", err)
	}
}

func TestOnlyTheConfiguredNamespacesMetricsAndSelectorsAreServed(t *testing.T) {
	p := newTestProvider(t, table{})
	ctx := context.Background()
	_, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "team-a", Name: "sd-serve"}, servicesInfo, labels.Everything())
	if !apierr.IsNotFound(err) {
		t.Fatalf("another namespace gave %v, want NotFound", err)
	}
	other := servicesInfo
	other.Metric = "gpu_utilization"
	if _, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "inference", Name: "sd-serve"}, other, labels.Everything()); !apierr.IsNotFound(err) {
		t.Fatalf("an unconfigured metric gave %v, want NotFound", err)
	}
	sel := labels.SelectorFromSet(labels.Set{"code": "500"})
	if _, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "inference", Name: "sd-serve"}, servicesInfo, sel); !apierr.IsBadRequest(err) {
		t.Fatalf("a metric selector gave %v, want BadRequest", err)
	}
	if _, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: "inference", Name: `x"} or vector(1)`}, servicesInfo, labels.Everything()); !apierr.IsBadRequest(err) {
		t.Fatalf("a name that is not a DNS subdomain gave %v, want BadRequest", err)
	}
}

// The answers below are Prometheus 2.42's own (Debian bookworm's prometheus, captured as testdata/README.md says).
func TestParseQueryResponseOfRealPrometheusAnswers(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, err := ParseQueryResponse(200, read("prometheus-2.42-vector-one.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Value <= 0 || s.Time.Year() != 2026 {
		t.Fatalf("one series: %+v", s)
	}
	if s, err = ParseQueryResponse(200, read("prometheus-2.42-scalar.json")); err != nil || s.Value != 2.5 {
		t.Fatalf("scalar: %+v, %v", s, err)
	}
	if _, err = ParseQueryResponse(200, read("prometheus-2.42-vector-empty.json")); !errors.Is(err, ErrNoSample) {
		t.Fatalf("empty vector: %v, want ErrNoSample", err)
	}
	if _, err = ParseQueryResponse(200, read("prometheus-2.42-vector-nan.json")); !errors.Is(err, ErrNoSample) {
		t.Fatalf("NaN: %v, want ErrNoSample", err)
	}
	if _, err = ParseQueryResponse(200, read("prometheus-2.42-vector-two.json")); err == nil || !strings.Contains(err.Error(), "aggregate to one") {
		t.Fatalf("two series: %v, want a refusal saying it must aggregate", err)
	}
	if _, err = ParseQueryResponse(200, read("prometheus-2.42-matrix.json")); err == nil || !strings.Contains(err.Error(), "matrix") {
		t.Fatalf("range vector: %v, want a refusal naming the matrix", err)
	}
	if _, err = ParseQueryResponse(400, read("prometheus-2.42-error-bad-data.json")); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Fatalf("bad query: %v, want Prometheus's own error", err)
	}
	if _, err = ParseQueryResponse(502, []byte("<html>Bad Gateway</html>")); err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("a proxy's page: %v, want an error naming the status", err)
	}
}
