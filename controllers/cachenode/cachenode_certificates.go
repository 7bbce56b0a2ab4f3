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
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// A renewed Secret reaches a cache pod when its kubelet syncs the pod, up to its
// syncFrequency (a minute) later. The operator reads no Secret, but cert-manager's
// Certificates say when the Secret they write was renewed (status.revision): where
// cert-manager is installed, a new revision of a site's Certificate is announced on the
// cache pods, whose kubelets then sync at once, as for a new configuration.

// CertificateRevisionsAnnotation on a cache pod lists the revisions of the cert-manager
// Certificates that write its sites' Secrets: "secretName=revision,...", by Secret name.
const CertificateRevisionsAnnotation = "edgepool.io/certificate-revisions"

// CertificateGVK is cert-manager's Certificate, read as unstructured: edgepool links no
// cert-manager code and reads only its metadata, spec.secretName and status.revision.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch

// certManagerInstalled says whether the API server serves cert-manager's Certificates.
func certManagerInstalled(mapper meta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(CertificateGVK.GroupKind(), CertificateGVK.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("look up %s: %w", CertificateGVK, err)
	}
}

func newCertificate() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(CertificateGVK)
	return u
}

// trimCertificate keeps of a Certificate what the operator reads, so that the cache holds
// no more of it (nor of its status' messages).
func trimCertificate(u *unstructured.Unstructured) {
	secret, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
	revision, hasRevision, _ := unstructured.NestedInt64(u.Object, "status", "revision")
	trimmed := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": map[string]any{
		"name": u.GetName(), "namespace": u.GetNamespace(), "uid": string(u.GetUID()), "resourceVersion": u.GetResourceVersion(),
	}}
	if secret != "" {
		trimmed["spec"] = map[string]any{"secretName": secret}
	}
	if hasRevision {
		trimmed["status"] = map[string]any{"revision": revision}
	}
	u.Object = trimmed
}

// tlsSecrets lists the Secrets of cn's sites.
func tlsSecrets(cn *v1alpha1.CacheNode) []string {
	var out []string
	for _, s := range cn.Spec.Sites {
		if s.TLS != nil && !slices.Contains(out, s.TLS.SecretName) {
			out = append(out, s.TLS.SecretName)
		}
	}
	sort.Strings(out)
	return out
}

// certificateRevisions is the CertificateRevisionsAnnotation for secrets, from the
// Certificates of their namespace: "" when no Certificate writes one of them.
func certificateRevisions(certs []unstructured.Unstructured, secrets []string) string {
	var parts []string
	for _, secret := range secrets {
		// Two Certificates writing one Secret is cert-manager's misconfiguration; the
		// greatest revision stands for it.
		revision, found := int64(0), false
		for i := range certs {
			name, _, _ := unstructured.NestedString(certs[i].Object, "spec", "secretName")
			if name != secret {
				continue
			}
			r, ok, _ := unstructured.NestedInt64(certs[i].Object, "status", "revision")
			if ok && (!found || r > revision) {
				revision, found = r, true
			}
		}
		if found {
			parts = append(parts, fmt.Sprintf("%s=%d", secret, revision))
		}
	}
	return strings.Join(parts, ",")
}

// revisionsOf reads the revisions of cn's sites' Certificates ("" without cert-manager).
func (r *Reconciler) revisionsOf(ctx context.Context, cn *v1alpha1.CacheNode) (string, error) {
	secrets := tlsSecrets(cn)
	if !r.certManager || len(secrets) == 0 {
		return "", nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(CertificateGVK.GroupVersion().WithKind(CertificateGVK.Kind + "List"))
	if err := r.List(ctx, list, client.InNamespace(cn.Namespace)); err != nil {
		return "", fmt.Errorf("list Certificates: %w", err)
	}
	return certificateRevisions(list.Items, secrets), nil
}

// cacheNodesOfCertificate maps a Certificate to the CacheNodes of its namespace with a site
// whose Secret it writes.
func (r *Reconciler) cacheNodesOfCertificate(ctx context.Context, obj client.Object) []reconcile.Request {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	secret, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
	if secret == "" {
		return nil
	}
	list := &v1alpha1.CacheNodeList{}
	if err := r.List(ctx, list, client.InNamespace(u.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list CacheNodes for a Certificate event")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if slices.Contains(tlsSecrets(&list.Items[i]), secret) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// certificateRenewed passes Certificates created or deleted, and updates of their Secret's
// name or revision: cert-manager writes their status often otherwise.
func certificateRenewed() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldCert, okOld := e.ObjectOld.(*unstructured.Unstructured)
			newCert, okNew := e.ObjectNew.(*unstructured.Unstructured)
			if !okOld || !okNew {
				return true
			}
			for _, path := range [][]string{{"spec", "secretName"}, {"status", "revision"}} {
				a, _, _ := unstructured.NestedFieldNoCopy(oldCert.Object, path...)
				b, _, _ := unstructured.NestedFieldNoCopy(newCert.Object, path...)
				if fmt.Sprint(a) != fmt.Sprint(b) {
					return true
				}
			}
			return false
		},
	}
}
