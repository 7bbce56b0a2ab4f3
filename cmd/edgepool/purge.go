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

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// purgeFlags is edgepool purge's command line.
type purgeFlags struct {
	namespace, name, cacheNode string
	urls, prefixes, tags       []string
	all, soft, wait            bool
	timeout                    time.Duration
	kubeconfig, context        string
}

// purgeFlagSet declares purge's flags into f.
func purgeFlagSet(f *purgeFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("purge", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error, with the usage, is returned
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&f.namespace, n, "", "namespace of the CacheNode (default: the kubeconfig context's)")
	}
	fs.StringVar(&f.name, "name", "", "name of the CachePurge (default: generated from the CacheNode's)")
	fs.Func("url", "URL to purge (repeatable)", func(v string) error { f.urls = append(f.urls, v); return nil })
	fs.Func("prefix", "HOST/PATH prefix to purge (repeatable)", func(v string) error { f.prefixes = append(f.prefixes, v); return nil })
	fs.Func("tag", "tag whose responses to purge (repeatable): the origin labels responses with tags in Surrogate-Key or Cache-Tag", func(v string) error { f.tags = append(f.tags, v); return nil })
	fs.BoolVar(&f.all, "all", false, "purge the whole cache")
	fs.BoolVar(&f.soft, "soft", false, "mark the objects stale rather than removing them: each is revalidated with the origin (a 304 when it did not change) before it is served again")
	fs.BoolVar(&f.wait, "wait", true, "wait until the purge is Complete or Failed")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long to wait")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context (default: the current one)")
	return fs
}

// parsePurgeFlags reads the command line; flags may come before or after the CacheNode,
// as kubectl takes them.
func parsePurgeFlags(args []string) (purgeFlags, error) {
	var f purgeFlags
	fs := purgeFlagSet(&f)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return f, err
		}
		if args = fs.Args(); len(args) == 0 {
			break
		}
		rest, args = append(rest, args[0]), args[1:]
	}
	if len(rest) != 1 {
		return f, fmt.Errorf("purge needs one CacheNode, got %d arguments", len(rest))
	}
	f.cacheNode = rest[0]
	if f.wait && f.timeout <= 0 {
		return f, errors.New("--timeout must be positive")
	}
	return f, nil
}

// purgeFromFlags builds the CachePurge the flags ask for, refusing what the API server or
// the agents would refuse. Its namespace is empty when -n was not given.
func purgeFromFlags(f purgeFlags) (*v1alpha1.CachePurge, error) {
	var errs []error
	msgs := validation.IsDNS1123Subdomain(f.cacheNode)
	if len(f.cacheNode) > 52 {
		msgs = append(msgs, "must be no more than 52 characters")
	}
	if len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("CacheNode %.64q: not the name of a CacheNode: %s", f.cacheNode, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(f.name); f.name != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--name %.64q: %s", f.name, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(f.namespace); f.namespace != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--namespace %.64q: %s", f.namespace, strings.Join(msgs, "; ")))
	}
	// What to purge, as the agents take it: checked with their allowlists and bounds,
	// which are the schema's.
	what := agentapi.PurgeSpec{Soft: f.soft}
	scopes := 0
	for _, set := range []bool{len(f.urls) > 0, len(f.prefixes) > 0, len(f.tags) > 0, f.all} {
		if set {
			scopes++
		}
	}
	switch {
	case scopes != 1:
		errs = append(errs, errors.New("say what to purge with one of --url, --prefix, --tag or --all"))
	case f.all:
		what.Scope = agentapi.PurgeScopeAll
	case len(f.tags) > 0:
		what.Scope = agentapi.PurgeScopeTags
		for _, tag := range f.tags {
			if !slices.Contains(what.Tags, tag) {
				what.Tags = append(what.Tags, tag)
			}
		}
	case len(f.urls) > 0:
		what.Scope = agentapi.PurgeScopeURLs
		for _, u := range f.urls {
			if !slices.Contains(what.URLs, u) {
				what.URLs = append(what.URLs, u)
			}
		}
	default:
		what.Scope = agentapi.PurgeScopePrefixes
		for _, p := range f.prefixes {
			host, path, ok := strings.Cut(p, "/")
			if !ok {
				errs = append(errs, fmt.Errorf("--prefix %.64q: not HOST/PATH, e.g. www.example.com/img/", p))
				continue
			}
			path = "/" + path
			i := slices.IndexFunc(what.Prefixes, func(h agentapi.PurgeHost) bool { return h.Host == host })
			if i < 0 {
				what.Prefixes = append(what.Prefixes, agentapi.PurgeHost{Host: host})
				i = len(what.Prefixes) - 1
			}
			if h := &what.Prefixes[i]; !slices.Contains(h.Paths, path) {
				h.Paths = append(h.Paths, path)
			}
		}
	}
	if what.Scope != "" {
		if err := what.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	p := &v1alpha1.CachePurge{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: f.name},
		Spec:       v1alpha1.CachePurgeSpec{CacheNode: f.cacheNode, Scope: v1alpha1.PurgeScope(what.Scope), URLs: what.URLs, Tags: what.Tags, Soft: what.Soft},
	}
	for _, h := range what.Prefixes {
		p.Spec.Prefixes = append(p.Spec.Prefixes, v1alpha1.PurgeHost{Host: h.Host, Paths: h.Paths})
	}
	if p.Name == "" {
		p.GenerateName = f.cacheNode + "-"
	}
	return p, nil
}

// purge creates the CachePurge the command line asks for, with the user's kubeconfig, and
// waits for it unless --wait=false.
func purge(args []string, stdout io.Writer) error {
	f, err := parsePurgeFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return showUsage(stdout, purgeFlagSet(&purgeFlags{}))
	} else if err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	p, err := purgeFromFlags(f)
	if err != nil {
		return err
	}
	kubeconfig := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: f.kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{CurrentContext: f.context})
	if p.Namespace == "" {
		if p.Namespace, _, err = kubeconfig.Namespace(); err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
	}
	cfg, err := kubeconfig.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return createPurge(ctx, c, p, f.wait, f.timeout, stdout)
}

// createPurge creates p and, with wait, waits for it. The API server's refusal comes
// through as it said it, naming the field. A CacheNode that does not exist is refused
// first: a typo would otherwise wait for it until the deadline (a manifest applied before
// its CacheNode, as GitOps may, does wait). One the user may not read is left to the
// controller to find.
func createPurge(ctx context.Context, c client.WithWatch, p *v1alpha1.CachePurge, wait bool, timeout time.Duration, out io.Writer) error {
	key := client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.CacheNode}
	if err := c.Get(ctx, key, &v1alpha1.CacheNode{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("CacheNode %s not found in namespace %s: nothing to purge (kubectl get cachenodes -n %s lists them)", key.Name, key.Namespace, key.Namespace)
	}
	if err := c.Create(ctx, p); err != nil {
		return fmt.Errorf("create CachePurge: %w", err)
	}
	fmt.Fprintf(out, "cachepurge/%s created\n", p.Name)
	if !wait {
		return nil
	}
	return waitPurge(ctx, c, p, timeout, out)
}

// waitPurge watches p until it is Complete or Failed, as kubectl wait would, printing the
// nodes done and the objects removed as they change. It returns nil once p is Complete,
// and an error with the condition's message, which names the nodes, once it failed or
// after timeout.
func waitPurge(ctx context.Context, c client.WithWatch, p *v1alpha1.CachePurge, timeout time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	only := func(o metav1.ListOptions) *client.ListOptions {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.Name).String()
		return &client.ListOptions{Namespace: p.Namespace, Raw: &o}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.CachePurgeList{}
			return list, c.List(ctx, list, only(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1alpha1.CachePurgeList{}, only(o))
		},
	}
	type progress struct {
		nodes, done, failed int
		removed             int64
	}
	last, shown, waiting := p, progress{}, ""
	purged := "removed"
	if p.Spec.Soft {
		purged = "marked stale"
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &v1alpha1.CachePurge{}, nil, func(e watch.Event) (bool, error) {
		got, ok := e.Object.(*v1alpha1.CachePurge)
		if !ok {
			return false, nil
		}
		last = got
		st := got.Status
		complete := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
		switch now := (progress{len(st.Nodes), int(st.DoneNodes), int(st.FailedNodes), st.ObjectsRemoved}); {
		case now != shown:
			fmt.Fprintf(out, "cachepurge/%s: %d/%d nodes done, %d failed, %d objects %s\n", got.Name, now.done, now.nodes, now.failed, now.removed, purged)
			shown = now
		case len(st.Nodes) == 0 && complete != nil && complete.Status != metav1.ConditionTrue && complete.Message != waiting:
			// No node yet, e.g. the CacheNode is missing: say what it waits for.
			fmt.Fprintf(out, "cachepurge/%s: %s\n", got.Name, complete.Message)
			waiting = complete.Message
		}
		if complete != nil && complete.Status == metav1.ConditionTrue {
			fmt.Fprintf(out, "cachepurge/%s complete: %s\n", got.Name, complete.Message)
			return true, nil
		}
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			return true, fmt.Errorf("cachepurge/%s failed: %s", got.Name, c.Message)
		}
		if e.Type == watch.Deleted {
			return true, fmt.Errorf("cachepurge/%s was deleted before it finished", got.Name)
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		stopped := fmt.Sprintf("timed out after %s", timeout)
		if errors.Is(ctx.Err(), context.Canceled) {
			stopped = "interrupted"
		}
		how := "not reconciled yet"
		if c := meta.FindStatusCondition(last.Status.Conditions, v1alpha1.ConditionComplete); c != nil {
			how = c.Message
		}
		return fmt.Errorf("%s waiting for cachepurge/%s to complete (%s); the operator goes on until its deadline: kubectl get cachepurge -n %s %s",
			stopped, p.Name, how, p.Namespace, p.Name)
	}
	return err
}
