package metricsadapter

import (
	"context"
	"errors"
	"fmt"
	"math"

	apierr "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider/helpers"
)

// Source answers one PromQL query (a Querier, or a test's table).
type Source interface {
	Query(ctx context.Context, query string) (Sample, error)
}

// Provider serves the configured metrics through the custom metrics API.
type Provider struct {
	config *Config
	source Source
	mapper apimeta.RESTMapper
	client dynamic.Interface
}

var _ provider.CustomMetricsProvider = (*Provider)(nil)

// NewProvider answers from source; mapper and client resolve the objects a selector names.
func NewProvider(config *Config, source Source, mapper apimeta.RESTMapper, client dynamic.Interface) *Provider {
	return &Provider{config: config, source: source, mapper: mapper, client: client}
}

// ListAllMetrics is the discovery document: every configured metric, namespaced.
func (p *Provider) ListAllMetrics() []provider.CustomMetricInfo {
	out := make([]provider.CustomMetricInfo, 0, len(p.config.Metrics))
	for _, m := range p.config.Metrics {
		out = append(out, provider.CustomMetricInfo{
			GroupResource: schema.ParseGroupResource(m.Resource), Namespaced: true, Metric: m.Name,
		})
	}
	return out
}

// GetMetricByName is the metric of one object: what an HPA's Object metric reads.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info provider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	rule, err := p.rule(info, metricSelector)
	if err != nil {
		return nil, err
	}
	if !p.config.Serves(name.Namespace) {
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	query, err := rule.QueryFor(name.Namespace, name.Name)
	if err != nil {
		return nil, apierr.NewBadRequest(err.Error())
	}
	sample, err := p.source.Query(ctx, query)
	if errors.Is(err, ErrNoSample) {
		klog.V(2).InfoS("no value", "metric", info.Metric, "object", name.String(), "reason", err)
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	if err != nil {
		// The HPA reports this in its conditions (FailedGetObjectMetric) and keeps its replica count.
		klog.ErrorS(err, "query failed", "metric", info.Metric, "object", name.String())
		return nil, apierr.NewServiceUnavailable(fmt.Sprintf("metric %s of %s: %v", info.Metric, name.String(), err))
	}
	ref, err := helpers.ReferenceFor(p.mapper, name, info)
	if err != nil {
		return nil, err
	}
	return &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.NewTime(sample.Time),
		Value:           *Quantity(sample.Value),
	}, nil
}

// GetMetricBySelector is the metric of every object a label selector matches (kubectl get --raw .../*/metric);
// an object without a value is left out.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	if _, err := p.rule(info, metricSelector); err != nil {
		return nil, err
	}
	if !p.config.Serves(namespace) {
		return &custom_metrics.MetricValueList{}, nil
	}
	names, err := helpers.ListObjectNames(p.mapper, p.client, namespace, selector, info)
	if err != nil {
		return nil, err
	}
	out := &custom_metrics.MetricValueList{}
	for _, n := range names {
		v, err := p.GetMetricByName(ctx, types.NamespacedName{Namespace: namespace, Name: n}, info, metricSelector)
		if apierr.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *v)
	}
	return out, nil
}

func (p *Provider) rule(info provider.CustomMetricInfo, metricSelector labels.Selector) (*MetricRule, error) {
	if metricSelector != nil && !metricSelector.Empty() {
		return nil, apierr.NewBadRequest(fmt.Sprintf("metric %s takes no metric selector (got %q)", info.Metric, metricSelector.String()))
	}
	rule := p.config.Rule(info.GroupResource.String(), info.Metric)
	if rule == nil || !info.Namespaced {
		return nil, provider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	return rule, nil
}

// Quantity is v in thousandths, the precision HPAs compare at (resource.Quantity's milli scale).
func Quantity(v float64) *resource.Quantity {
	return resource.NewMilliQuantity(int64(math.Round(v*1000)), resource.DecimalSI)
}
