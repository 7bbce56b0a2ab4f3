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

package cachenode

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// One setter per condition, each a pure function of the observation.

// conditionSetters compute one condition each from the observation (and the hash
// setStatus wrote into the status).
var conditionSetters = []func(*v1alpha1.CacheNode, observation) metav1.Condition{
	configRenderedCondition, nodesEligibleCondition, availableCondition, progressingCondition,
	queueOverflowCondition, disksReadyCondition, configAppliedCondition, certificatesReadyCondition,
	degradedCondition, stalledCondition, reconcilingCondition, readyCondition,
}

func newCondition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// notObserved is the condition of a type whose input the reconcile could not read.
func notObserved(typ, what string, obs observation) metav1.Condition {
	msg := what + " could not be read"
	if obs.observeErr != nil {
		msg += ": " + obs.observeErr.Error()
	}
	return newCondition(typ, metav1.ConditionUnknown, v1alpha1.ReasonNotObserved, msg)
}

// blocker is what keeps a CacheNode from being served as specified, first cause first.
// final says it waits for someone to act (kstatus' Stalled); otherwise it is retried.
type blocker struct {
	reason, message string
	final           bool
}

func (obs observation) blocker() *blocker {
	switch {
	case obs.renderErr != nil:
		return &blocker{v1alpha1.ReasonRenderFailed, "nginx.conf cannot be rendered: " + obs.renderErr.Error(), true}
	case obs.conflict != "":
		return &blocker{v1alpha1.ReasonDiskPathConflict, obs.conflict, true}
	case obs.applyErr != nil:
		return &blocker{v1alpha1.ReasonApplyFailed, obs.applyErr.Error(), obs.applyFinal}
	case obs.nodes != nil && obs.nodes.eligible == 0:
		return &blocker{v1alpha1.ReasonNoEligibleNodes, obs.nodes.message(), true}
	}
	return nil
}

func (n *nodeEligibility) message() string {
	msg := fmt.Sprintf("%d of %d selected nodes have the required disks and tolerate their taints", n.eligible, n.selected)
	if len(n.ineligible) > 0 {
		msg += "; not eligible: " + nameSome(n.ineligible)
	}
	return msg
}

// podCounts are the DaemonSet's pod counts; the zero value stands for no DaemonSet.
type podCounts struct {
	exists, current             bool
	desired, available, updated int32
}

func (obs observation) pods() podCounts {
	ds := obs.daemonSet
	if ds == nil {
		return podCounts{}
	}
	s := ds.Status
	return podCounts{exists: true, current: s.ObservedGeneration >= ds.Generation,
		desired: s.DesiredNumberScheduled, available: s.NumberAvailable, updated: s.UpdatedNumberScheduled}
}

func (p podCounts) allAvailable() bool {
	return p.current && p.desired > 0 && p.available >= p.desired
}

func (p podCounts) rollingOut() bool {
	return !p.exists || !p.current || p.updated < p.desired || p.available < p.desired
}

func (p podCounts) String() string {
	return fmt.Sprintf("%d of %d cache pods available, %d updated", p.available, p.desired, p.updated)
}

func configRenderedCondition(cn *v1alpha1.CacheNode, obs observation) metav1.Condition {
	if obs.renderErr != nil {
		return newCondition(v1alpha1.ConditionConfigRendered, metav1.ConditionFalse, v1alpha1.ReasonRenderFailed,
			obs.renderErr.Error()+"; the last good configuration keeps serving")
	}
	return newCondition(v1alpha1.ConditionConfigRendered, metav1.ConditionTrue, v1alpha1.ReasonRendered, "nginx.conf rendered, hash "+short(obs.configHash))
}

func nodesEligibleCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionNodesEligible
	switch n := obs.nodes; {
	case n == nil:
		return notObserved(typ, "the nodes", obs)
	case n.eligible == 0:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonNoEligibleNodes, n.message())
	default:
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonNodesEligible, n.message())
	}
}

func availableCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionAvailable
	switch p := obs.pods(); {
	case !obs.daemonSetSeen:
		return notObserved(typ, "the DaemonSet", obs)
	case p.allAvailable():
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonPodsAvailable, p.String())
	case p.desired == 0:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonNoPods, "no node runs a cache pod")
	default:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonPodsUnavailable, p.String())
	}
}

func progressingCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionProgressing
	switch p := obs.pods(); {
	case !obs.daemonSetSeen:
		return notObserved(typ, "the DaemonSet", obs)
	case p.rollingOut():
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonRollingOut, p.String())
	default:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonStable, p.String())
	}
}

// degradedCondition: something keeps the cache from serving as specified, or serving well.
func degradedCondition(cn *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionDegraded
	if b := obs.blocker(); b != nil {
		return newCondition(typ, metav1.ConditionTrue, b.reason, b.message)
	}
	if len(obs.troubles) > 0 {
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonPodsFailing, "cache pods do not run: "+troubleMessage(obs.troubles))
	}
	if a := obs.agentNews(); len(a.answered) > 0 {
		switch disks := disksOf(a.answered); {
		case disks.notReady():
			return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonDisksNotReady, "see the DisksReady condition")
		case disks.anyOut():
			out := map[string]string{}
			for node, d := range disks.allOut {
				out[node] = "every disk: " + strings.Join(d.names, ", ")
			}
			for node, d := range disks.out {
				out[node] = strings.Join(d.names, ", ")
			}
			return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonDisksOut,
				"disks taken out of their node's split, served from the origin into the other disks: "+nameSome(out)+"; see the DisksReady condition")
		case rejectedConfig(a.answered, cn.Status.ConfigHash):
			return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonConfigRejected, "see the ConfigApplied condition")
		case len(certificateProblems(a.answered)) > 0:
			return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonCertificatesNotReady, "see the CertificatesReady condition")
		case len(overflows(a.answered)) > 0:
			return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonQueueOverflow, "see the QueueOverflow condition")
		}
	}
	switch p := obs.pods(); {
	case !obs.daemonSetSeen:
		return notObserved(typ, "the DaemonSet", obs)
	case !p.rollingOut() && !p.allAvailable():
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonPodsUnavailable, p.String())
	default:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "")
	}
}

// stalledCondition is kstatus' Failed: only a change of spec or nodes helps.
func stalledCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	if b := obs.blocker(); b != nil && b.final {
		return newCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, b.reason, b.message)
	}
	return newCondition(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "")
}

// reconcilingCondition is kstatus' InProgress: it resolves by itself.
func reconcilingCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionReconciling
	b := obs.blocker()
	switch {
	case b != nil && !b.final:
		return newCondition(typ, metav1.ConditionTrue, b.reason, b.message+"; retrying")
	case b != nil:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "")
	case obs.observeErr != nil:
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonObserveFailed, obs.observeErr.Error()+"; retrying")
	case obs.pods().rollingOut():
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonRollingOut, obs.pods().String())
	default:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonReconciled, "")
	}
}

func readyCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionReady
	notServing := obs.notServing()
	switch p := obs.pods(); {
	case obs.blocker() != nil:
		b := obs.blocker()
		return newCondition(typ, metav1.ConditionFalse, b.reason, b.message)
	case !obs.daemonSetSeen:
		return notObserved(typ, "the DaemonSet", obs)
	case !p.allAvailable() && len(obs.troubles) > 0:
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonPodsFailing, p.String()+"; not running: "+troubleMessage(obs.troubles))
	case len(notServing) > 0:
		// Whatever the DaemonSet counted last: these pods are unready, or about to be.
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonDisksNotReady,
			p.String()+"; not serving because of their disks: "+nameSome(notServing)+"; see the DisksReady condition")
	case !p.allAvailable():
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonPodsUnavailable, p.String())
	default:
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonReady, p.String())
	}
}

// agentNews splits the agents' reports into the answers and a suffix naming the agents
// that did not answer: those are named in the messages, not treated as failures.
type agentNews struct {
	answered []agentReport
	suffix   string
}

func (obs observation) agentNews() agentNews {
	var news agentNews
	unanswered := map[string]string{}
	for _, r := range obs.agents {
		if r.err != nil {
			unanswered[nodeOrPod(r)] = r.err.Error()
		} else {
			news.answered = append(news.answered, r)
		}
	}
	if len(unanswered) > 0 {
		news.suffix = "; no answer from " + nameSome(unanswered)
	}
	return news
}

// agentCondition is the Unknown condition of a type fed by the agents when no agent's
// report is at hand; ok is false then.
func agentCondition(typ string, obs observation, news agentNews) (metav1.Condition, bool) {
	switch {
	case !obs.agentsSeen:
		return notObserved(typ, "the cache pods", obs), false
	case len(obs.agents) == 0:
		return newCondition(typ, metav1.ConditionUnknown, v1alpha1.ReasonNoAgentReports, "no running cache pod to ask"), false
	case len(news.answered) == 0:
		return newCondition(typ, metav1.ConditionUnknown, v1alpha1.ReasonNoAgentReports, "no cache pod's agent answered"+news.suffix), false
	}
	return metav1.Condition{}, true
}

// poolOverflow is one pool's overflows on one node.
type poolOverflow struct {
	node, pool string
	count      int64
}

// overflows lists the pools that overflowed, the worst first.
func overflows(answered []agentReport) []poolOverflow {
	var out []poolOverflow
	for _, r := range answered {
		for _, o := range r.status.Overflows {
			out = append(out, poolOverflow{nodeOrPod(r), o.Pool, o.Count})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].node+out[i].pool < out[j].node+out[j].pool
	})
	return out
}

func queueOverflowCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionQueueOverflow
	news := obs.agentNews()
	if c, ok := agentCondition(typ, obs, news); !ok {
		return c
	}
	window := 0
	for _, r := range news.answered {
		window = max(window, r.status.WindowSeconds)
	}
	worst := overflows(news.answered)
	if len(worst) == 0 {
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonNoOverflow, fmt.Sprintf(
			"no thread-pool queue overflowed in the last %ds on %s%s", window, nodes(len(news.answered)), news.suffix))
	}
	parts := make([]string, 0, maxNamedNodes+1)
	for i, o := range worst {
		if i == maxNamedNodes {
			parts = append(parts, fmt.Sprintf("and %d more", len(worst)-maxNamedNodes))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s: %d", o.node, o.pool, o.count))
	}
	return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonQueueOverflow, fmt.Sprintf(
		"thread-pool queues overflowed in the last %ds (the origin answered those requests): %s; raise the disk's threadPool.threads above its cold concurrency, or maxQueue%s",
		window, strings.Join(parts, ", "), news.suffix))
}

// diskNews sorts the agents' disk reports by what they mean, per node: disks that keep
// nginx from starting, disks a running node took out of its split (its other disks serve
// their keys), nodes whose every disk is out (they do not serve), and disks failing
// checks that are still in the split.
type diskNews struct {
	notStarted, out, allOut, failing map[string]nodeDisks
	// failoverFailed names the nodes that could not apply their failover, and why.
	failoverFailed map[string]string
}

// nodeDisks are some disks of one node, each with its reason.
type nodeDisks struct{ names, reasons []string }

func (d *nodeDisks) add(name, reason string) {
	d.names = append(d.names, name)
	d.reasons = append(d.reasons, name+": "+reason)
}

// described is "name: reason; ..." per node.
func described(m map[string]nodeDisks) map[string]string {
	out := map[string]string{}
	for node, d := range m {
		out[node] = strings.Join(d.reasons, "; ")
	}
	return out
}

func disksOf(answered []agentReport) diskNews {
	news := diskNews{notStarted: map[string]nodeDisks{}, out: map[string]nodeDisks{}, allOut: map[string]nodeDisks{}, failing: map[string]nodeDisks{},
		failoverFailed: map[string]string{}}
	for _, r := range answered {
		var out, failing nodeDisks
		for _, d := range r.status.Disks {
			switch {
			case d.Out && d.OtherFilesystem:
				out.add(d.Name, d.Reason) // it says why the disk stays out
			case d.Out:
				out.add(d.Name, d.OutReason)
			case !d.Ready:
				failing.add(d.Name, d.Reason)
			}
		}
		node := nodeOrPod(r)
		if r.status.FailoverError != "" && len(out.names) > 0 {
			news.failoverFailed[node] = strings.Join(out.names, ", ") + ": " + r.status.FailoverError
		}
		switch {
		case r.status.ConfigHash == "" && len(failing.names) > 0:
			news.notStarted[node] = failing
		case len(out.names) > 0 && len(out.names) == len(r.status.Disks):
			news.allOut[node] = out
		case len(out.names) > 0:
			news.out[node] = out
			if len(failing.names) > 0 {
				news.failing[node] = failing
			}
		case len(failing.names) > 0:
			news.failing[node] = failing
		}
	}
	return news
}

// notServing names the nodes whose agents say their pod cannot serve because of its
// disks (nginx not started, every disk out, or a failover not applied), and why.
func (obs observation) notServing() map[string]string {
	disks := disksOf(obs.agentNews().answered)
	out := described(disks.notStarted)
	for node, d := range disks.allOut {
		out[node] = "every disk out: " + strings.Join(d.reasons, "; ")
	}
	for node, why := range disks.failoverFailed {
		out[node] = "failover not applied: " + why
	}
	return out
}

func (n diskNews) notReady() bool { return len(n.notStarted)+len(n.failing)+len(n.failoverFailed) > 0 }
func (n diskNews) anyOut() bool   { return len(n.out)+len(n.allOut) > 0 }

func disksReadyCondition(_ *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionDisksReady
	news := obs.agentNews()
	if c, ok := agentCondition(typ, obs, news); !ok {
		return c
	}
	disks := disksOf(news.answered)
	var parts []string
	reason := ""
	add := func(r string, nodesWith map[string]nodeDisks, format string) {
		if len(nodesWith) == 0 {
			return
		}
		if reason == "" {
			reason = r
		}
		parts = append(parts, fmt.Sprintf(format, len(nodesWith), nodes(len(news.answered)), nameSome(described(nodesWith))))
	}
	add(v1alpha1.ReasonDiskCheckFailed, disks.notStarted, "%d of %s have disks that failed their checks (nginx is not started there): %s")
	if len(disks.failoverFailed) > 0 {
		if reason == "" {
			reason = v1alpha1.ReasonFailoverFailed
		}
		parts = append(parts, fmt.Sprintf("%d of %s could not take failing disks out of their split (nginx still sends them keys, the pods are unready): %s",
			len(disks.failoverFailed), nodes(len(news.answered)), nameSome(disks.failoverFailed)))
	}
	add(v1alpha1.ReasonAllDisksOut, disks.allOut, "%d of %s took every disk out of their split (they do not serve, their pods are unready): %s")
	add(v1alpha1.ReasonDisksOut, disks.out, "%d of %s took disks out of their split (their keys go to the node's other disks): %s")
	add(v1alpha1.ReasonDiskCheckFailed, disks.failing, "%d of %s have disks failing their checks, still in the split: %s")
	if len(parts) > 0 {
		return newCondition(typ, metav1.ConditionFalse, reason, strings.Join(parts, "; ")+news.suffix)
	}
	return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonDisksReady, fmt.Sprintf(
		"all disks passed their checks on %s%s", nodes(len(news.answered)), news.suffix))
}

// behind says, per node, why it does not run the configuration named hash.
func behind(answered []agentReport, hash string) map[string]string {
	out := map[string]string{}
	for _, r := range answered {
		if r.status.ConfigHash == hash {
			continue
		}
		why := "runs " + short(r.status.ConfigHash)
		if r.status.ConfigHash == "" {
			why = "runs no configuration yet"
		}
		if r.status.ConfigError != "" {
			why += ", rejected the newest: " + r.status.ConfigError
		}
		out[nodeOrPod(r)] = why
	}
	return out
}

// rejectedConfig reports whether an agent refused the configuration named hash.
func rejectedConfig(answered []agentReport, hash string) bool {
	for _, r := range answered {
		if r.status.ConfigHash != hash && r.status.ConfigError != "" {
			return true
		}
	}
	return false
}

// configAppliedCondition: every pod runs the configuration the status names.
func configAppliedCondition(cn *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionConfigApplied
	news := obs.agentNews()
	if c, ok := agentCondition(typ, obs, news); !ok {
		return c
	}
	hash := cn.Status.ConfigHash
	if late := behind(news.answered, hash); len(late) > 0 {
		return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonConfigNotApplied, fmt.Sprintf(
			"configuration %s is running on %d of %s; %s%s",
			short(hash), len(news.answered)-len(late), nodes(len(news.answered)), nameSome(late), news.suffix))
	}
	return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonConfigApplied, fmt.Sprintf(
		"configuration %s is running on %s%s", short(hash), nodes(len(news.answered)), news.suffix))
}

// certificateProblem is one state of one Secret that is not Serving, and the nodes that
// report it.
type certificateProblem struct {
	secret string
	state  agentapi.CertificateState
	nodes  map[string]string // node: the agent's message
}

// certificateProblems groups the certificates not Serving by Secret and state, the
// worst state first, then by Secret.
func certificateProblems(answered []agentReport) []*certificateProblem {
	byKey := map[string]*certificateProblem{}
	var out []*certificateProblem
	for _, r := range answered {
		for _, c := range r.status.Certificates {
			if c.State == agentapi.CertificateServing {
				continue
			}
			key := c.SecretName + "\x00" + string(c.State)
			p := byKey[key]
			if p == nil {
				p = &certificateProblem{secret: c.SecretName, state: c.State, nodes: map[string]string{}}
				byKey[key] = p
				out = append(out, p)
			}
			p.nodes[nodeOrPod(r)] = c.Message
		}
	}
	rank := func(s agentapi.CertificateState) int { return slices.Index(agentapi.CertificateStates, s) }
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i].state), rank(out[j].state); ri != rj {
			return ri < rj
		}
		return out[i].secret < out[j].secret
	})
	return out
}

// certificateConsequence says what a node serves in each state.
var certificateConsequence = map[agentapi.CertificateState]string{
	agentapi.CertificatePlaceholder: "serving a self-signed placeholder (no good certificate seen since the pod started; " +
		"a Secret created since reaches the pod at its kubelet's next sync, within about 90 s: the operator does not read Secrets to announce it)",
	agentapi.CertificateMissing:          "serving the last good certificate",
	agentapi.CertificateInvalid:          "serving the last good certificate",
	agentapi.CertificateExpired:          "serving it anyway",
	agentapi.CertificateNotYetValid:      "serving it anyway",
	agentapi.CertificateHostnameMismatch: "it covers none of the site's hostnames; serving it anyway",
}

// certificatesReadyCondition: every node serves each site's certificate from its Secret,
// valid and for the site's hostnames. Problems are named by Secret, with the nodes.
func certificatesReadyCondition(cn *v1alpha1.CacheNode, obs observation) metav1.Condition {
	const typ = v1alpha1.ConditionCertificatesReady
	if !slices.ContainsFunc(cn.Spec.Sites, func(s v1alpha1.Site) bool { return s.TLS != nil }) {
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonNoCertificates, "no site has TLS")
	}
	news := obs.agentNews()
	if c, ok := agentCondition(typ, obs, news); !ok {
		return c
	}
	// Only a node whose nginx runs serves certificates, and says which.
	serving := slices.DeleteFunc(slices.Clone(news.answered), func(r agentReport) bool { return r.status.ConfigHash == "" })
	if len(serving) == 0 {
		return newCondition(typ, metav1.ConditionUnknown, v1alpha1.ReasonNoAgentReports,
			fmt.Sprintf("nginx runs on none of the %s that answered, so no certificate is served yet (see DisksReady)%s", nodes(len(news.answered)), news.suffix))
	}
	problems := certificateProblems(serving)
	if len(problems) == 0 {
		secrets := map[string]bool{}
		for _, r := range serving {
			for _, c := range r.status.Certificates {
				secrets[c.SecretName] = true
			}
		}
		return newCondition(typ, metav1.ConditionTrue, v1alpha1.ReasonCertificatesServing, fmt.Sprintf(
			"the certificates of %d Secret(s) serve on %s%s", len(secrets), nodes(len(serving)), news.suffix))
	}
	parts := make([]string, 0, len(problems))
	for _, p := range problems {
		names := slices.Sorted(maps.Keys(p.nodes))
		part := fmt.Sprintf("Secret %s: %s on %s (%s); %s", p.secret, p.state, nodes(len(names)), nameList(names),
			certificateConsequence[p.state])
		if p.state != agentapi.CertificateMissing {
			// What the first node says is wrong, without what the part says already.
			why := strings.TrimPrefix(p.nodes[names[0]], "Secret "+p.secret+": ")
			why, _, _ = strings.Cut(why, "; serving the last good certificate")
			part += " (" + names[0] + ": " + why + ")"
		}
		parts = append(parts, part)
	}
	return newCondition(typ, metav1.ConditionFalse, v1alpha1.ReasonCertificatePrefix+string(problems[0].state), strings.Join(parts, "; ")+news.suffix)
}
