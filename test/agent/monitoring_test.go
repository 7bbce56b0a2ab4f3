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

package agent_test

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// TestAlertsAndDashboardNameLiveMetrics: every edgepool metric the alerts and the
// dashboard name is one a live agent exports, after one miss, one hit and one request a
// client limit refused. (test/monitoring
// parses the same files with Prometheus' parser and checks that they name no metric but
// edgepool's and up.)
func TestAlertsAndDashboardNameLiveMetrics(t *testing.T) {
	srv, _ := cacheableOrigin(t)
	spec := testSpec(t, originAddr(srv), disk("d0", diskDir(t, "d0"), "SSD"))
	spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: 1, Burst: 1}
	cfg := newConfigDir(t)
	// A site with TLS, for the certificate metrics.
	secrets := newSecretVolumes(t, "shop")
	secrets.write(t, "shop", issueLeaf(t, newCA(t), "shop.example").SecretFiles())
	writeTLSConf(t, cfg, spec, freePort(t), tlsSite{"shop", "shop.example"})
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--tls-secrets-dir", secrets.root)
	agent.waitReady(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for range 2 {
		fetch(client, spec.Listener.Port, "/obj/1")
	}
	if code, _ := fetch(client, spec.Listener.Port, "/obj/1"); code != http.StatusTooManyRequests {
		t.Fatalf("a third request within a second: %d, want 429 (burst 1)", code)
	}
	eventually(t, 10*time.Second, "the three requests and the refusal counted", func() bool {
		return agent.requestSum(t, "edgepool_requests_total", nil) == 3 &&
			agent.metric("edgepool_client_limited_total", map[string]string{"limit": "rate"}) == 1
	})
	live, err := agent.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exported := func(name string) bool {
		if _, ok := live[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if f, ok := live[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && f.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
		return false
	}
	name := regexp.MustCompile(`\bedgepool_[a-z0-9_]+\b`)
	for _, file := range []string{"../../config/prometheus/alerts.yaml", "../../config/grafana/edgepool-cache.json"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, n := range name.FindAllString(string(data), -1) {
			if found[n] {
				continue
			}
			found[n] = true
			if !exported(n) {
				t.Errorf("%s names %s, which the agent does not export", file, n)
			}
		}
		if len(found) < 5 {
			t.Errorf("%s: only %d metric names found", file, len(found))
		}
	}
}
