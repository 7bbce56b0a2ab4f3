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

// Package monitoring checks the cache's alerts (config/prometheus/alerts.yaml) and
// dashboard (config/grafana) with Prometheus' own parser and engine: every expression
// parses, names only edgepool's metrics (which test/agent checks against a live agent's
// /metrics) or Prometheus' up, and two alerts fire on synthetic series exactly when they
// should, as promtool's rule tests would have them.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"go.yaml.in/yaml/v3"
)

const (
	alertsFile    = "../../config/prometheus/alerts.yaml"
	podMonitor    = "../../config/prometheus/pod_monitor.yaml"
	dashboardFile = "../../config/grafana/edgepool-cache.json"
	runbookFile   = "../../docs/runbook.md"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var doc struct {
		Spec struct {
			Groups []struct {
				Rules []rule `yaml:"rules"`
			} `yaml:"groups"`
		} `yaml:"spec"`
	}
	readYAML(t, alertsFile, &doc)
	var rules []rule
	for _, g := range doc.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", alertsFile)
	}
	return rules
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// dashboardExprs are the queries of the dashboard's panels and variables, with Grafana's
// own variables given values (the dashboard's $namespace and the like sit in label
// matchers' strings, where PromQL takes them as they are).
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")
	exprs := map[string]string{}
	for _, p := range d.Panels {
		for i, target := range p.Targets {
			exprs[fmt.Sprintf("panel %q target %d", p.Title, i)] = grafana.Replace(target.Expr)
		}
	}
	// label_values(SELECTOR, LABEL): the selector is PromQL.
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		m := labelValues.FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q["query"])
			continue
		}
		exprs["variable "+v.Name] = m[1]
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: only %d queries", dashboardFile, len(exprs))
	}
	return exprs
}

// TestExpressionsParse parses every expression of the alerts and the dashboard with
// Prometheus' parser, and checks that each names only edgepool_* metrics or up: test/agent
// finds the edgepool_* names in the same files and checks them against a live agent.
func TestExpressionsParse(t *testing.T) {
	exprs := dashboardExprs(t)
	for _, r := range alertRules(t) {
		exprs["alert "+r.Alert] = r.Expr
	}
	p := parser.NewParser(parser.Options{})
	for where, expr := range exprs {
		ast, err := p.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			continue
		}
		names := 0
		parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				names++
				if vs.Name != "up" && !strings.HasPrefix(vs.Name, "edgepool_") {
					t.Errorf("%s: names %q, which no node agent exports", where, vs.Name)
				}
			}
			return nil
		})
		if names == 0 {
			t.Errorf("%s: selects no metric", where)
		}
	}
}

// TestAlertsAreComplete: every alert has a severity, a summary and a runbook entry in
// docs/runbook.md, and up names the PodMonitor's job.
func TestAlertsAreComplete(t *testing.T) {
	runbook, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	var monitor struct {
		Spec struct {
			Endpoints []struct {
				Relabelings []struct {
					TargetLabel string `yaml:"targetLabel"`
					Replacement string `yaml:"replacement"`
				} `yaml:"relabelings"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	readYAML(t, podMonitor, &monitor)
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		if seen[r.Alert] {
			t.Errorf("alert %s twice", r.Alert)
		}
		seen[r.Alert] = true
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) || r.Annotations["summary"] == "" {
			t.Errorf("alert %s: severity %q, summary %q", r.Alert, r.Labels["severity"], r.Annotations["summary"])
		}
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "/docs/runbook.md#"+anchor) || !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
			t.Errorf("alert %s: runbook_url %q, want docs/runbook.md#%s and a section of that name", r.Alert, r.Annotations["runbook_url"], anchor)
		}
		if r.For != "" {
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for: %v", r.Alert, err)
			}
		}
		if strings.Contains(r.Expr, "up{") {
			job := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindStringSubmatch(r.Expr)
			relabeled := false
			for _, e := range monitor.Spec.Endpoints {
				for _, rl := range e.Relabelings {
					relabeled = relabeled || (job != nil && rl.TargetLabel == "job" && rl.Replacement == job[1])
				}
			}
			if !relabeled {
				t.Errorf("alert %s: %s is not the PodMonitor's job", r.Alert, r.Expr)
			}
		}
	}
	for _, want := range []string{"EdgepoolQueueOverflow", "EdgepoolDiskOut", "EdgepoolDiskNotReady", "EdgepoolConfigRejected",
		"EdgepoolAgentUnreachable", "EdgepoolHitRatioDrop", "EdgepoolOriginErrors", "EdgepoolCertificateExpiringSoon",
		"EdgepoolCertificateNotServing"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// firing evaluates an alert as Prometheus's rule manager would every minute, and returns
// the alerts firing at the given time: those its expression returned at every evaluation
// of the for duration before.
func firing(t *testing.T, series string, r rule, at time.Duration) []string {
	t.Helper()
	storage := promqltest.LoadedStorage(t, series)
	engine := promqltest.NewTestEngine(t, false, 0, 1e7)
	hold := time.Duration(0)
	if r.For != "" {
		d, err := model.ParseDuration(r.For)
		if err != nil {
			t.Fatal(err)
		}
		hold = time.Duration(d)
	}
	epoch := time.Unix(0, 0).UTC()
	q, err := engine.NewRangeQuery(context.Background(), storage, nil, r.Expr, epoch.Add(at-hold), epoch.Add(at), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range m {
		if len(s.Floats) == int(hold/time.Minute)+1 {
			out = append(out, s.Metric.String())
		}
	}
	slices.Sort(out)
	return out
}

func alert(t *testing.T, name string) rule {
	t.Helper()
	for _, r := range alertRules(t) {
		if r.Alert == name {
			return r
		}
	}
	t.Fatalf("no alert %s", name)
	return rule{}
}

// TestOriginErrorsAlert: cachenode a's origin answers 5xx to one request in six from
// minute 10 on, b's to one in a hundred throughout. Only a fires, once its 5-minute rate
// has been above 5% for 5 minutes.
func TestOriginErrorsAlert(t *testing.T) {
	const series = `
load 1m
  edgepool_origin_responses_total{namespace="edge", cachenode="a", node="n1", pod="a-1", status_class="2xx"} 0+100x40
  edgepool_origin_responses_total{namespace="edge", cachenode="a", node="n1", pod="a-1", status_class="5xx"} 0+1x10 30+20x30
  edgepool_origin_responses_total{namespace="edge", cachenode="a", node="n2", pod="a-2", status_class="2xx"} 0+100x40
  edgepool_origin_responses_total{namespace="edge", cachenode="b", node="n1", pod="b-1", status_class="2xx"} 0+100x40
  edgepool_origin_responses_total{namespace="edge", cachenode="b", node="n1", pod="b-1", status_class="5xx"} 0+1x40
`
	r := alert(t, "EdgepoolOriginErrors")
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{9 * time.Minute, nil},
		{13 * time.Minute, nil}, // above 5%, not yet for 5 minutes
		{20 * time.Minute, []string{`{cachenode="a", namespace="edge"}`}},
		{40 * time.Minute, []string{`{cachenode="a", namespace="edge"}`}},
	} {
		if got := firing(t, series, r, tc.at); !slices.Equal(got, tc.want) {
			t.Errorf("at %v: firing %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestHitRatioDropAlert: node n1's hit ratio falls from 90% to 10% at minute 400, n2's
// stays at 90%, and n3's falls too but it serves less than a request a second. Only n1
// fires, once its 15-minute ratio has been below half of the 6 hours before for 15
// minutes.
func TestHitRatioDropAlert(t *testing.T) {
	const series = `
load 1m
  edgepool_requests_total{namespace="edge", cachenode="a", node="n1", pod="a-1", disk="d0", cache_status="HIT", status_class="2xx"} 0+90x400 36010+10x79
  edgepool_requests_total{namespace="edge", cachenode="a", node="n1", pod="a-1", disk="d0", cache_status="MISS", status_class="2xx"} 0+10x400 4090+90x79
  edgepool_requests_total{namespace="edge", cachenode="a", node="n2", pod="a-2", disk="d0", cache_status="HIT", status_class="2xx"} 0+90x480
  edgepool_requests_total{namespace="edge", cachenode="a", node="n2", pod="a-2", disk="d0", cache_status="MISS", status_class="2xx"} 0+10x480
  edgepool_requests_total{namespace="edge", cachenode="a", node="n3", pod="a-3", disk="d0", cache_status="HIT", status_class="2xx"} 0+9x400 3601+1x79
  edgepool_requests_total{namespace="edge", cachenode="a", node="n3", pod="a-3", disk="d0", cache_status="MISS", status_class="2xx"} 0+1x400 409+9x79
`
	r := alert(t, "EdgepoolHitRatioDrop")
	n1 := []string{`{cachenode="a", namespace="edge", node="n1"}`}
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{399 * time.Minute, nil},
		{415 * time.Minute, nil}, // below half, not yet for 15 minutes
		{430 * time.Minute, n1},
		{470 * time.Minute, n1},
	} {
		if got := firing(t, series, r, tc.at); !slices.Equal(got, tc.want) {
			t.Errorf("at %v: firing %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestCertificateExpiringSoonAlert: site shop's certificate expires on day 10, until its
// renewal (to day 30) reaches the nodes at minute 5000; blog's on day 30. shop fires once
// it has been within 7 days of its expiry for an hour, and stops with the renewal.
func TestCertificateExpiringSoonAlert(t *testing.T) {
	const series = `
load 1m
  edgepool_certificate_expiry_timestamp_seconds{namespace="edge", cachenode="a", node="n1", pod="a-1", site="shop"} 864000+0x4999 2592000+0x1000
  edgepool_certificate_expiry_timestamp_seconds{namespace="edge", cachenode="a", node="n2", pod="a-2", site="shop"} 864000+0x4999 2592000+0x1000
  edgepool_certificate_expiry_timestamp_seconds{namespace="edge", cachenode="a", node="n1", pod="a-1", site="blog"} 2592000+0x6000
`
	r := alert(t, "EdgepoolCertificateExpiringSoon")
	shop := []string{`{cachenode="a", namespace="edge", site="shop"}`}
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{48 * time.Hour, nil},
		{72*time.Hour + 30*time.Minute, nil}, // within 7 days, not yet for an hour
		{74 * time.Hour, shop},
		{4950 * time.Minute, shop},
		{5100 * time.Minute, nil},
	} {
		if got := firing(t, series, r, tc.at); !slices.Equal(got, tc.want) {
			t.Errorf("at %v: firing %v, want %v", tc.at, got, tc.want)
		}
	}
}
