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

package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// TestPurgeAllowlistsMatchTheAgent keeps the schema's patterns and bounds equal to the
// ones the node agent checks every purge against (internal/agentapi).
func TestPurgeAllowlistsMatchTheAgent(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "cache.edgepool.io_cachepurges.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	urls, prefixes, tags := spec.Properties["urls"], spec.Properties["prefixes"], spec.Properties["tags"]
	host, paths := prefixes.Items.Schema.Properties["host"], prefixes.Items.Schema.Properties["paths"]
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"urls pattern", urls.Items.Schema.Pattern, agentapi.PurgeURLPattern},
		{"urls maxItems", *urls.MaxItems, int64(agentapi.MaxPurgeURLs)},
		{"urls maxLength", *urls.Items.Schema.MaxLength, int64(agentapi.MaxPurgeURLLength)},
		{"prefixes maxItems", *prefixes.MaxItems, int64(agentapi.MaxPurgeHosts)},
		{"host pattern", host.Pattern, agentapi.PurgeHostPattern},
		{"paths pattern", paths.Items.Schema.Pattern, agentapi.PurgePathPattern},
		{"paths maxItems", *paths.MaxItems, int64(agentapi.MaxPurgePaths)},
		{"paths maxLength", *paths.Items.Schema.MaxLength, int64(agentapi.MaxPurgePathLength)},
		{"tags pattern", tags.Items.Schema.Pattern, agentapi.PurgeTagPattern},
		{"tags maxItems", *tags.MaxItems, int64(agentapi.MaxPurgeTags)},
		{"tags maxLength", *tags.Items.Schema.MaxLength, int64(agentapi.MaxTagLength)},
		{"scopes", enum(spec.Properties["scope"].Enum), fmt.Sprintf("[%q %q %q %q]", agentapi.PurgeScopeURLs, agentapi.PurgeScopePrefixes, agentapi.PurgeScopeTags, agentapi.PurgeScopeAll)},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: the schema has %v, the agent %v", c.name, c.got, c.want)
		}
	}
}

// enum lists a schema's enum as JSON strings.
func enum(values []apiextensionsv1.JSON) string {
	var s []string
	for _, v := range values {
		s = append(s, string(v.Raw))
	}
	return "[" + strings.Join(s, " ") + "]"
}

func purge(name string, scope v1alpha1.PurgeScope) *v1alpha1.CachePurge {
	p := &v1alpha1.CachePurge{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: scope},
	}
	switch scope {
	case v1alpha1.PurgeURLs:
		p.Spec.URLs = []string{"https://www.example.com/index.html"}
	case v1alpha1.PurgePrefixes:
		p.Spec.Prefixes = []v1alpha1.PurgeHost{{Host: "www.example.com", Paths: []string{"/img/"}}}
	case v1alpha1.PurgeTags:
		p.Spec.Tags = []string{"product-42"}
	}
	return p
}

func TestCachePurgeSampleIsAccepted(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "cache_v1alpha1_cachepurge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.CachePurge{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		t.Fatal(err)
	}
	p.Namespace = "default"
	if err := k8s.Create(context.Background(), p, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
}

// TestCachePurgesAreAccepted: each scope, at the bounds of its lists and strings, and the
// defaults the API server fills in.
func TestCachePurgesAreAccepted(t *testing.T) {
	long := "https://www.example.com/" + strings.Repeat("a", 2048-len("https://www.example.com/"))
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CachePurge)
	}{
		{"URLs", func(*v1alpha1.CachePurge) {}},
		{"every URI character", func(p *v1alpha1.CachePurge) {
			p.Spec.URLs = []string{"http://a.example/p/a-z_0.9~!$&'()*+,;=:@/?q=%2F%c3%a9", "http://[2001:db8::1]/", "http://192.0.2.1/x"}
		}},
		{"100 URLs at 2048 characters", func(p *v1alpha1.CachePurge) {
			p.Spec.URLs = nil
			for i := range 100 {
				p.Spec.URLs = append(p.Spec.URLs, fmt.Sprintf("%s%03d", long[:len(long)-3], i))
			}
		}},
		{"Prefixes", func(p *v1alpha1.CachePurge) { *p = *purge(p.Name, v1alpha1.PurgePrefixes) }},
		{"All", func(p *v1alpha1.CachePurge) { *p = *purge(p.Name, v1alpha1.PurgeAll) }},
		{"Tags, soft", func(p *v1alpha1.CachePurge) { *p = *purge(p.Name, v1alpha1.PurgeTags); p.Spec.Soft = true }},
		{"100 tags at 128 characters, every tag character", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgeTags)
			p.Spec.Tags = []string{"aZ09._~:/@!$&'()*+;=-"}
			for i := range 99 {
				p.Spec.Tags = append(p.Spec.Tags, fmt.Sprintf("%03d", i)+strings.Repeat("t", 125))
			}
		}},
		{"no TTL after finishing", func(p *v1alpha1.CachePurge) { p.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := purge("accepted", v1alpha1.PurgeURLs)
			tc.mutate(p)
			if err := k8s.Create(context.Background(), p, client.DryRunAll); err != nil {
				t.Fatal(err)
			}
		})
	}
	p := purge("defaults", v1alpha1.PurgeAll)
	if err := k8s.Create(context.Background(), p, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if p.Spec.ActiveDeadlineSeconds != 3600 || p.Spec.TTLSecondsAfterFinished == nil || *p.Spec.TTLSecondsAfterFinished != 86400 {
		t.Errorf("defaults: activeDeadlineSeconds %d, ttlSecondsAfterFinished %v; want 3600 and 86400",
			p.Spec.ActiveDeadlineSeconds, p.Spec.TTLSecondsAfterFinished)
	}
}

// TestInvalidCachePurgesAreRejected checks each rejection and that its message names the
// field.
func TestInvalidCachePurgesAreRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CachePurge)
		want   []string
	}{
		{"no cacheNode", func(p *v1alpha1.CachePurge) { p.Spec.CacheNode = "" }, []string{"spec.cacheNode"}},
		{"more than the purge list carries", func(p *v1alpha1.CachePurge) {
			p.Spec.Scope, p.Spec.URLs, p.Spec.Prefixes = v1alpha1.PurgePrefixes, nil, nil
			for h := range 16 {
				host := v1alpha1.PurgeHost{Host: fmt.Sprintf("h%02d.example", h)}
				for i := range 32 {
					host.Paths = append(host.Paths, fmt.Sprintf("/%03d", i)+strings.Repeat("a", 1020))
				}
				p.Spec.Prefixes = append(p.Spec.Prefixes, host)
			}
		}, []string{"spec", "a purge lists at most 204800 characters of URLs, hosts and paths"}},
		{"cacheNode too long", func(p *v1alpha1.CachePurge) { p.Spec.CacheNode = strings.Repeat("a", 53) },
			[]string{"spec.cacheNode", "may not be more than 52"}},
		{"no scope", func(p *v1alpha1.CachePurge) { p.Spec.Scope = "" }, []string{"spec.scope"}},
		{"unknown scope", func(p *v1alpha1.CachePurge) { p.Spec.Scope = "Everything" }, []string{"spec.scope", "Unsupported value"}},
		{"URLs without urls", func(p *v1alpha1.CachePurge) { p.Spec.URLs = nil },
			[]string{"spec.urls", "urls must be set when scope is URLs"}},
		{"All with urls", func(p *v1alpha1.CachePurge) { p.Spec.Scope = v1alpha1.PurgeAll },
			[]string{"spec.urls", "urls must be set when scope is URLs, and only then"}},
		{"URLs with prefixes", func(p *v1alpha1.CachePurge) {
			p.Spec.Prefixes = []v1alpha1.PurgeHost{{Host: "a.example", Paths: []string{"/"}}}
		}, []string{"spec.prefixes", "prefixes must be set when scope is Prefixes, and only then"}},
		{"Prefixes without prefixes", func(p *v1alpha1.CachePurge) { p.Spec.Scope, p.Spec.URLs = v1alpha1.PurgePrefixes, nil },
			[]string{"spec.prefixes", "prefixes must be set when scope is Prefixes"}},
		{"Tags without tags", func(p *v1alpha1.CachePurge) { p.Spec.Scope, p.Spec.URLs = v1alpha1.PurgeTags, nil },
			[]string{"spec.tags", "tags must be set when scope is Tags"}},
		{"URLs with tags", func(p *v1alpha1.CachePurge) { p.Spec.Tags = []string{"a"} },
			[]string{"spec.tags", "tags must be set when scope is Tags, and only then"}},
		{"a tag with a space", func(p *v1alpha1.CachePurge) { *p = *purge(p.Name, v1alpha1.PurgeTags); p.Spec.Tags = []string{"a b"} },
			[]string{"spec.tags[0]", "should match"}},
		{"a tag with a comma", func(p *v1alpha1.CachePurge) { *p = *purge(p.Name, v1alpha1.PurgeTags); p.Spec.Tags = []string{"a,b"} },
			[]string{"spec.tags[0]", "should match"}},
		{"a tag too long", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgeTags)
			p.Spec.Tags = []string{strings.Repeat("t", 129)}
		}, []string{"spec.tags[0]", "Too long"}},
		{"101 tags", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgeTags)
			p.Spec.Tags = nil
			for i := range 101 {
				p.Spec.Tags = append(p.Spec.Tags, fmt.Sprint(i))
			}
		}, []string{"spec.tags", "Too many"}},
		{"URL with a port", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://www.example.com:8443/a"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with an upper-case host", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://WWW.example.com/a"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL without a path", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://www.example.com"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with another scheme", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"ftp://www.example.com/a"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with a space", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://a.example/a b"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with a newline", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://a.example/a\nKEY: x"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with a quote", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{`https://a.example/a"`} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with a fragment", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://a.example/a#top"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with a bad escape", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://a.example/%zz"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL with user info", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://u@a.example/"} },
			[]string{"spec.urls[0]", "should match"}},
		{"URL too long", func(p *v1alpha1.CachePurge) {
			p.Spec.URLs = []string{"https://a.example/" + strings.Repeat("a", 2048)}
		}, []string{"spec.urls[0]", "Too long"}},
		{"101 URLs", func(p *v1alpha1.CachePurge) {
			p.Spec.URLs = nil
			for i := range 101 {
				p.Spec.URLs = append(p.Spec.URLs, fmt.Sprintf("https://a.example/%d", i))
			}
		}, []string{"spec.urls", "must have at most 100 items"}},
		{"duplicate URLs", func(p *v1alpha1.CachePurge) { p.Spec.URLs = []string{"https://a.example/", "https://a.example/"} },
			[]string{"spec.urls[1]", "Duplicate value"}},
		{"prefix host with a port", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes[0].Host = "a.example:80"
		}, []string{"spec.prefixes[0].host", "should match"}},
		{"prefix path not absolute", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes[0].Paths = []string{"img/"}
		}, []string{"spec.prefixes[0].paths[0]", "should match"}},
		{"prefix path with a NUL", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes[0].Paths = []string{"/a\x00"}
		}, []string{"spec.prefixes[0].paths[0]", "should match"}},
		{"prefix without paths", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes[0].Paths = nil
		}, []string{"spec.prefixes[0].paths"}},
		{"a host twice", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes = append(p.Spec.Prefixes, p.Spec.Prefixes[0])
		}, []string{"spec.prefixes[1]", "Duplicate value"}},
		{"33 paths", func(p *v1alpha1.CachePurge) {
			*p = *purge(p.Name, v1alpha1.PurgePrefixes)
			p.Spec.Prefixes[0].Paths = nil
			for i := range 33 {
				p.Spec.Prefixes[0].Paths = append(p.Spec.Prefixes[0].Paths, fmt.Sprintf("/%d/", i))
			}
		}, []string{"spec.prefixes[0].paths", "must have at most 32 items"}},
		{"deadline too short", func(p *v1alpha1.CachePurge) { p.Spec.ActiveDeadlineSeconds = 5 },
			[]string{"spec.activeDeadlineSeconds", "greater than or equal to 10"}},
		{"deadline above a week", func(p *v1alpha1.CachePurge) { p.Spec.ActiveDeadlineSeconds = 604801 },
			[]string{"spec.activeDeadlineSeconds", "less than or equal to 604800"}},
		{"negative TTL", func(p *v1alpha1.CachePurge) { p.Spec.TTLSecondsAfterFinished = ptr.To[int32](-1) },
			[]string{"spec.ttlSecondsAfterFinished", "greater than or equal to 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := purge("invalid", v1alpha1.PurgeURLs)
			tc.mutate(p)
			err := k8s.Create(context.Background(), p, client.DryRunAll)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestCachePurgeSpecIsImmutable: a purge is a record of what was asked; its status is
// the operator's to write.
func TestCachePurgeSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	p := purge("immutable", v1alpha1.PurgeURLs)
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	changed := p.DeepCopy()
	changed.Spec.URLs = []string{"https://www.example.com/other"}
	err := k8s.Update(ctx, changed)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("changing the spec: want Invalid naming the rule, got %v", err)
	}
	labelled := p.DeepCopy()
	labelled.Labels = map[string]string{"team": "web"}
	if err := k8s.Update(ctx, labelled); err != nil {
		t.Errorf("changing labels: %v", err)
	}
	labelled.Status = v1alpha1.CachePurgeStatus{
		ObservedGeneration: 1, PendingNodes: 1, DoneNodes: 1, ObjectsRemoved: 3,
		Nodes: []v1alpha1.PurgeNode{
			{Node: "n1", Pod: "edge-a", Phase: v1alpha1.PurgeDone, ObjectsRemoved: 3, LastUpdateTime: metav1.Now()},
			{Node: "n2", Phase: v1alpha1.PurgePending, Message: "no answer"},
		},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse, Reason: "NodesPending",
			LastTransitionTime: metav1.Now()}},
	}
	if err := k8s.Status().Update(ctx, labelled); err != nil {
		t.Errorf("writing the status: %v", err)
	}
}

// TestCachePurgeRoles binds the shipped ClusterRoles in one namespace and checks, as the
// API server authorizes, that the editor may purge and nothing more, and the viewer may
// only read.
func TestCachePurgeRoles(t *testing.T) {
	ctx := context.Background()
	for role, user := range map[string]string{"editor": "purger", "viewer": "reader"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "cachepurge_"+role+"_role.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cr := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict(data, cr); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: "default"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}
		if err := k8s.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, rb); _ = k8s.Delete(ctx, cr) })
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(testEnv.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: testEnv.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	purger, reader := as("purger"), as("reader")

	p := purge("by-rbac", v1alpha1.PurgeAll)
	if err := purger.Create(ctx, p); err != nil {
		t.Fatalf("the editor could not create a CachePurge: %v", err)
	}
	for what, err := range map[string]error{
		"the editor writes the status":     purger.Status().Update(ctx, p),
		"the editor creates a CacheNode":   purger.Create(ctx, minimal("by-rbac"), client.DryRunAll),
		"the editor reads Secrets":         purger.List(ctx, &corev1.SecretList{}, client.InNamespace("default")),
		"the editor purges elsewhere":      purger.Create(ctx, &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "kube-system"}, Spec: p.Spec}, client.DryRunAll),
		"the viewer creates a CachePurge":  reader.Create(ctx, purge("by-reader", v1alpha1.PurgeAll), client.DryRunAll),
		"the viewer deletes a CachePurge":  reader.Delete(ctx, p, client.DryRunAll),
		"the viewer reads CacheNodes":      reader.List(ctx, &v1alpha1.CacheNodeList{}, client.InNamespace("default")),
		"the editor changes a CachePurge":  purger.Update(ctx, p, client.DryRunAll),
		"the viewer reads another project": reader.List(ctx, &v1alpha1.CachePurgeList{}, client.InNamespace("kube-system")),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want Forbidden, got %v", what, err)
		}
	}
	if err := reader.List(ctx, &v1alpha1.CachePurgeList{}, client.InNamespace("default")); err != nil {
		t.Errorf("the viewer could not list CachePurges: %v", err)
	}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(p), &v1alpha1.CachePurge{}); err != nil {
		t.Errorf("the viewer could not get a CachePurge: %v", err)
	}
	if err := purger.Delete(ctx, p); err != nil {
		t.Errorf("the editor could not delete its CachePurge: %v", err)
	}
}
