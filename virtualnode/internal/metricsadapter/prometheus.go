package metricsadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrNoSample is a query that answered no sample: the object has no value now (no traffic series yet, or a
// Prometheus that lost it). The HPA then keeps the replica count it has (fail-static), it never reads a zero.
var ErrNoSample = errors.New("the query returned no sample")

// Sample is one value and the time Prometheus evaluated it at.
type Sample struct {
	Value float64
	Time  time.Time
}

// apiResponse is the Prometheus HTTP API's envelope (https://prometheus.io/docs/prometheus/latest/querying/api/).
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  []json.RawMessage `json:"value"`
}

// ParseQueryResponse reads the answer of /api/v1/query: one sample from a vector of one series or a scalar.
func ParseQueryResponse(status int, body []byte) (Sample, error) {
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return Sample{}, fmt.Errorf("Prometheus answered HTTP %d that is not its API's JSON: %s", status, excerpt(body))
	}
	if r.Status != "success" {
		if r.Error == "" {
			return Sample{}, fmt.Errorf("Prometheus answered HTTP %d, status %q without an error", status, r.Status)
		}
		return Sample{}, fmt.Errorf("Prometheus refused the query (%s): %s", r.ErrorType, r.Error)
	}
	var d queryData
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return Sample{}, fmt.Errorf("Prometheus's data is not a query result: %w", err)
	}
	switch d.ResultType {
	case "scalar":
		var pair []json.RawMessage
		if err := json.Unmarshal(d.Result, &pair); err != nil {
			return Sample{}, fmt.Errorf("a scalar result that is not [time, value]: %w", err)
		}
		return parsePair(pair)
	case "vector":
		var v []vectorSample
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return Sample{}, fmt.Errorf("a vector result that is not a list of samples: %w", err)
		}
		switch len(v) {
		case 0:
			return Sample{}, ErrNoSample
		case 1:
			return parsePair(v[0].Value)
		default:
			return Sample{}, fmt.Errorf("the query returned %d series; it must aggregate to one (sum(...))", len(v))
		}
	default:
		return Sample{}, fmt.Errorf("the query returned a %q; it must return a vector of one sample or a scalar", d.ResultType)
	}
}

func parsePair(pair []json.RawMessage) (Sample, error) {
	if len(pair) != 2 {
		return Sample{}, fmt.Errorf("a sample of %d elements; expected [time, value]", len(pair))
	}
	var ts float64
	if err := json.Unmarshal(pair[0], &ts); err != nil {
		return Sample{}, fmt.Errorf("a sample time that is not a number: %s", excerpt(pair[0]))
	}
	var s string
	if err := json.Unmarshal(pair[1], &s); err != nil {
		return Sample{}, fmt.Errorf("a sample value that is not a string: %s", excerpt(pair[1]))
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Sample{}, fmt.Errorf("a sample value %q that is not a number", s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		// rate() over a counter that just appeared, a division by zero: no usable value, not a huge one.
		return Sample{}, fmt.Errorf("%w (the value is %s)", ErrNoSample, s)
	}
	sec, frac := math.Modf(ts)
	return Sample{Value: v, Time: time.Unix(int64(sec), int64(frac*1e9)).UTC()}, nil
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

// Querier runs instant queries against one Prometheus.
type Querier struct {
	base   *url.URL
	client *http.Client
}

// NewQuerier queries the Prometheus at base, each query bounded by timeout.
func NewQuerier(base string, timeout time.Duration) (*Querier, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil {
		return nil, err
	}
	return &Querier{base: u, client: &http.Client{Timeout: timeout}}, nil
}

// Query evaluates query now.
func (q *Querier) Query(ctx context.Context, query string) (Sample, error) {
	form := url.Values{"query": {query}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.base.String()+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return Sample{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := q.client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("Prometheus at %s: %w", q.base.Host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Sample{}, fmt.Errorf("Prometheus at %s: reading the answer: %w", q.base.Host, err)
	}
	return ParseQueryResponse(resp.StatusCode, body)
}
