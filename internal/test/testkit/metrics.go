/*
Copyright 2026 The edgepool Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package testkit

import (
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics are the samples of a Prometheus /metrics document.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads a document in Prometheus's text format.
func ParseMetrics(text string) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return families, nil
}

// Sum adds the values of the counters, gauges and untyped samples named name whose
// labels include every one of match; a histogram's value is its count of observations.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	total, _ := m.Find(name, match)
	return total
}

// Find is Sum, and whether any sample matched.
func (m Metrics) Find(name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, s := range m[name].GetMetric() {
		if hasLabels(s, match) {
			total += s.GetCounter().GetValue() + s.GetGauge().GetValue() + s.GetUntyped().GetValue() +
				float64(s.GetHistogram().GetSampleCount())
			found = true
		}
	}
	return total, found
}

// Each calls f with the labels and value of every counter, gauge or untyped sample
// named name.
func (m Metrics) Each(name string, f func(labels map[string]string, value float64)) {
	for _, s := range m[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		f(labels, s.GetCounter().GetValue()+s.GetGauge().GetValue()+s.GetUntyped().GetValue())
	}
}

func hasLabels(s *dto.Metric, match map[string]string) bool {
	found := 0
	for _, l := range s.GetLabel() {
		if v, ok := match[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(match)
}
