// Package metricsadapter is the decision half of gpucluster-metrics-adapter: the custom metrics an
// HorizontalPodAutoscaler may read (custom.metrics.k8s.io), each one PromQL query answered by Prometheus.
//
// A metric is declared for one resource (an InferenceService's Service: "services") with a query template in
// which <<.Namespace>> and <<.Name>> stand for the object the HPA asks about, the template convention of
// prometheus-adapter. The query must aggregate to one sample: the value the HPA reads for that object.
//
// The request rate of a Service is measured where its traffic enters, not inside its pods, so a replica on a
// rented GPU (whose pod the cluster's Prometheus cannot scrape) counts as much as one in the cluster and the HPA
// keeps working while the service runs rented.
package metricsadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"text/template"
	"time"
)

// Config is the adapter's configuration file (JSON; components/metrics_adapter.py renders it from the stack).
type Config struct {
	// PrometheusURL is the base URL of the Prometheus HTTP API (http://prometheus.telemetry:9090).
	PrometheusURL string `json:"prometheusUrl"`
	// QueryTimeoutSeconds bounds one query; 0 means 5.
	QueryTimeoutSeconds float64 `json:"queryTimeoutSeconds"`
	// Namespaces the adapter answers for; an object anywhere else has no metric.
	Namespaces []string `json:"namespaces"`
	// Metrics served.
	Metrics []MetricRule `json:"metrics"`
}

// MetricRule is one metric of one resource.
type MetricRule struct {
	// Name is what an HPA's metric.name says (requests_per_second).
	Name string `json:"name"`
	// Resource is the plural resource the metric describes, in the core group ("services").
	Resource string `json:"resource"`
	// Query is the PromQL template; <<.Namespace>> and <<.Name>> are the object's.
	Query string `json:"query"`

	tmpl *template.Template
}

var (
	metricName   = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// Resources the adapter can describe (what its RBAC lets it list); a metric of any other is refused.
var knownResources = map[string]bool{"services": true, "deployments.apps": true}

// ParseConfig reads and checks a configuration file's content; every error names the field at fault.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("the configuration is not the adapter's JSON: %w", err)
	}
	u, err := url.Parse(c.PrometheusURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheusUrl %q: expected an http(s) URL with a host", c.PrometheusURL)
	}
	if u.User != nil {
		return nil, errors.New("prometheusUrl: credentials in the URL are refused (they would show in logs)")
	}
	if c.QueryTimeoutSeconds < 0 || c.QueryTimeoutSeconds > 60 {
		return nil, fmt.Errorf("queryTimeoutSeconds %g: expected 0 (5 s) to 60", c.QueryTimeoutSeconds)
	}
	if len(c.Namespaces) == 0 {
		return nil, errors.New("namespaces: at least one namespace is required")
	}
	for i, ns := range c.Namespaces {
		if !dnsLabel.MatchString(ns) {
			return nil, fmt.Errorf("namespaces[%d] %q: not a DNS label", i, ns)
		}
	}
	if len(c.Metrics) == 0 {
		return nil, errors.New("metrics: at least one metric is required")
	}
	seen := map[string]bool{}
	for i := range c.Metrics {
		m := &c.Metrics[i]
		where := fmt.Sprintf("metrics[%d]", i)
		if !metricName.MatchString(m.Name) {
			return nil, fmt.Errorf("%s.name %q: expected lower case letters, digits and _ (at most 63)", where, m.Name)
		}
		if !knownResources[m.Resource] {
			return nil, fmt.Errorf("%s.resource %q: expected one of %s", where, m.Resource, strings.Join(sortedKeys(knownResources), ", "))
		}
		key := m.Resource + "/" + m.Name
		if seen[key] {
			return nil, fmt.Errorf("%s: %s is declared twice", where, key)
		}
		seen[key] = true
		if !strings.Contains(m.Query, "<<.Name>>") {
			return nil, fmt.Errorf("%s.query: it never names the object (<<.Name>>), so every object would read the same value", where)
		}
		t, err := template.New(key).Delims("<<", ">>").Option("missingkey=error").Parse(m.Query)
		if err != nil {
			return nil, fmt.Errorf("%s.query: %w", where, err)
		}
		if _, err := render(t, "ns", "name"); err != nil {
			return nil, fmt.Errorf("%s.query: %w", where, err)
		}
		m.tmpl = t
	}
	return &c, nil
}

// Timeout is one query's time limit.
func (c *Config) Timeout() time.Duration {
	if c.QueryTimeoutSeconds == 0 {
		return 5 * time.Second
	}
	return time.Duration(c.QueryTimeoutSeconds * float64(time.Second))
}

// Rule is the metric `name` of `resource`, or nil.
func (c *Config) Rule(resource, name string) *MetricRule {
	for i := range c.Metrics {
		if c.Metrics[i].Resource == resource && c.Metrics[i].Name == name {
			return &c.Metrics[i]
		}
	}
	return nil
}

// Serves says whether objects of namespace ns have metrics here.
func (c *Config) Serves(ns string) bool {
	for _, n := range c.Namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// QueryFor is the rule's PromQL for one object. Names are checked before they reach the query, so a name can
// never widen or rewrite it (an object's name is a DNS subdomain; anything else is refused).
func (m *MetricRule) QueryFor(namespace, name string) (string, error) {
	if !dnsLabel.MatchString(namespace) {
		return "", fmt.Errorf("namespace %q is not a DNS label", namespace)
	}
	if !dnsSubdomain.MatchString(name) {
		return "", fmt.Errorf("name %q is not a DNS subdomain", name)
	}
	return render(m.tmpl, namespace, name)
}

func render(t *template.Template, namespace, name string) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, struct{ Namespace, Name string }{namespace, name}); err != nil {
		return "", err
	}
	return b.String(), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
