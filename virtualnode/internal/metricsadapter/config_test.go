package metricsadapter

import (
	"strings"
	"testing"
)

const goodConfig = `{
  "prometheusUrl": "http://prometheus.telemetry:9090",
  "namespaces": ["inference"],
  "metrics": [{"name": "requests_per_second", "resource": "services",
               "query": "sum(rate(requests_total{namespace=\"<<.Namespace>>\",service=\"<<.Name>>\"}[30s]))"}]
}`

func TestParseConfigRendersTheObjectsQuery(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rule("services", "requests_per_second")
	if r == nil {
		t.Fatal("the configured metric is not found")
	}
	q, err := r.QueryFor("inference", "sd-serve")
	if err != nil {
		t.Fatal(err)
	}
	if want := `sum(rate(requests_total{namespace="inference",service="sd-serve"}[30s]))`; q != want {
		t.Fatalf("query %q, want %q", q, want)
	}
	if c.Rule("pods", "requests_per_second") != nil || c.Rule("services", "other") != nil {
		t.Fatal("a metric that is not configured was found")
	}
	if !c.Serves("inference") || c.Serves("team-a") {
		t.Fatal("the namespaces served are not the configured ones")
	}
	if c.Timeout().Seconds() != 5 {
		t.Fatalf("default timeout %v, want 5s", c.Timeout())
	}
}

func TestQueryForRefusesNamesThatWouldRewriteTheQuery(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rule("services", "requests_per_second")
	for _, name := range []string{`x"}) or vector(1e9`, "UPPER", "", "a b"} {
		if q, err := r.QueryFor("inference", name); err == nil {
			t.Errorf("name %q gave query %q, want a refusal", name, q)
		}
	}
	if _, err := r.QueryFor(`inference",x="`, "sd-serve"); err == nil {
		t.Error("a namespace that is not a DNS label was accepted")
	}
}

func TestParseConfigRefusals(t *testing.T) {
	base := func(repl ...string) string {
		s := goodConfig
		for i := 0; i+1 < len(repl); i += 2 {
			s = strings.Replace(s, repl[i], repl[i+1], 1)
		}
		return s
	}
	cases := map[string]struct{ config, want string }{
		"not json":           {"prometheusUrl: x", "not the adapter's JSON"},
		"unknown field":      {base(`"namespaces"`, `"namespace": 1, "namespaces"`), "unknown field"},
		"no scheme":          {base("http://prometheus.telemetry:9090", "prometheus:9090"), "prometheusUrl"},
		"credentials in url": {base("http://prometheus", "http://admin:s3cret@prometheus"), "credentials"},
		"no namespaces":      {base(`["inference"]`, `[]`), "namespaces"},
		"bad namespace":      {base(`["inference"]`, `["Inference"]`), "namespaces[0]"},
		"bad metric name":    {base("requests_per_second", "requests-per-second"), "metrics[0].name"},
		"bad resource":       {base(`"services"`, `"secrets"`), "metrics[0].resource"},
		"query without name": {base(`service=\"<<.Name>>\"`, `service=\"x\"`), "never names the object"},
		"bad template":       {base(`<<.Namespace>>`, `<<.Namespace`), "metrics[0].query"},
		"unknown key":        {base(`<<.Namespace>>`, `<<.Team>>`), "metrics[0].query"},
		"timeout too long":   {base(`"namespaces"`, `"queryTimeoutSeconds": 600, "namespaces"`), "queryTimeoutSeconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			if err == nil {
				t.Fatalf("accepted; want an error naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error %q echoes the password", err)
			}
		})
	}
}
