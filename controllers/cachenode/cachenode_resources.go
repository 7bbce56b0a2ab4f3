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
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/render"
)

// Pure builders of the objects a CacheNode owns. The API calls live in the controller.

const (
	// DiskLabelPrefix is the prefix of the node labels that count local disks per media,
	// e.g. disk.edgepool.io/nvme: "2".
	DiskLabelPrefix = "disk.edgepool.io/"
	// NFDNonRotationalLabel is Node Feature Discovery's label for nodes with non-rotational disks.
	NFDNonRotationalLabel = "feature.node.kubernetes.io/storage-nonrotationaldisk"

	// ConfigDir is where the cache container mounts the ConfigMap.
	ConfigDir = "/etc/edgepool"
	// RunDir is nginx's writable prefix (pid file, temp files): an emptyDir.
	RunDir = "/run/edgepool"

	// AgentCommand is the cache container's entrypoint: the node agent, which runs nginx.
	AgentCommand = "edgepool-agent"
	// DefaultCacheImage is the cache image `make images` builds, the operator's default
	// --cache-image.
	DefaultCacheImage = "edgepool/cache:0.1.0"

	// CacheUID runs the cache container as the nginx user of images/cache (and of the
	// official nginx images).
	CacheUID = 101
)

// configKeys are the keys of the ConfigMap the cache pods read (and nothing else of it).
var configKeys = []string{agentapi.ConfigKey, agentapi.FactsKey, agentapi.OperatorKeysKey, agentapi.ActivePurgesKey}

func configItems() []corev1.KeyToPath {
	items := make([]corev1.KeyToPath, len(configKeys))
	for i, k := range configKeys {
		items[i] = corev1.KeyToPath{Key: k, Path: k}
	}
	return items
}

// desiredConfigMap holds the rendered nginx.conf and, beside it, the facts the node agent
// needs about it, the operator's public keys and the CacheNode's purges (see
// cachenode_purges.go).
func desiredConfigMap(cn *v1alpha1.CacheNode, conf string, keys []ed25519.PublicKey, purges agentapi.ActivePurges) (*corev1.ConfigMap, error) {
	facts, _ := json.Marshal(render.Facts(&cn.Spec, conf)) // a struct of strings and ints always marshals
	pub, err := agentapi.EncodeOperatorKeys(keys)
	if err != nil {
		return nil, err
	}
	list := purges.Marshal()
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        cachepod.ConfigMapName(cn),
			Namespace:   cn.Namespace,
			Labels:      cachepod.ObjectLabels(cn),
			Annotations: map[string]string{OperatorKeysAnnotation: keysAnnotation(keys)},
		},
		Data: map[string]string{agentapi.ConfigKey: conf, agentapi.FactsKey: string(facts),
			agentapi.OperatorKeysKey: string(pub), agentapi.ActivePurgesKey: string(list)},
	}, nil
}

// imageReference is what spec.image's schema admits: a registry, repository, tag or digest,
// no spaces or shell syntax.
var imageReference = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]*$`)

// CheckImage refuses an image reference the schema would refuse in spec.image.
func CheckImage(ref string) error {
	if len(ref) > 255 || !imageReference.MatchString(ref) {
		return fmt.Errorf("image %q: want a reference of at most 255 letters, digits and . _ / : @ -, starting with a letter or digit", ref)
	}
	return nil
}

// desiredDaemonSet runs the cache on every eligible node. Its pod template depends only on
// the pod's shape (disks, ports, image, placement, resources), never on the rendered
// configuration, so configuration changes reload nginx in place instead of rolling pods.
func desiredDaemonSet(cn *v1alpha1.CacheNode, diskPrefixes []string, cacheImage string) *appsv1.DaemonSet {
	spec := &cn.Spec
	image := cacheImage
	if spec.Image != "" {
		image = spec.Image
	}
	volumes := []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cachepod.ConfigMapName(cn)},
			Items:                configItems(),
		}}},
		{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		// The pod's own ConfigHashAnnotation, which only the operator may write (the
		// admission policies): the agent runs only a ConfigMap that matches it.
		{Name: "announcement", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: agentapi.AnnouncedHashFile, FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['" + ConfigHashAnnotation + "']"}}},
		}}},
	}
	var diskMounts []corev1.VolumeMount
	for _, d := range spec.Disks {
		name := "disk-" + d.Name
		// HostPathDirectory: the disk's mount point must exist. DirectoryOrCreate would
		// silently put the cache on the node's root filesystem when a disk is missing.
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: d.Path, Type: ptr.To(corev1.HostPathDirectory)},
		}})
		// HostToContainer: a disk mounted on the node after the pod started reaches the
		// agent, which keeps checking, instead of the empty directory under it.
		diskMounts = append(diskMounts, corev1.VolumeMount{Name: name, MountPath: d.Path,
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
	}
	mounts := append([]corev1.VolumeMount{
		{Name: "config", MountPath: ConfigDir, ReadOnly: true},
		{Name: "announcement", MountPath: agentapi.AnnouncementDir, ReadOnly: true},
		{Name: "run", MountPath: RunDir},
	}, diskMounts...)
	tlsVolumes, tlsMounts := tlsVolumes(spec)
	volumes, mounts = append(volumes, tlsVolumes...), append(mounts, tlsMounts...)
	if limit := hotTierLimit(spec); limit != nil {
		volumes = append(volumes, corev1.Volume{Name: "hot", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: limit}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "hot", MountPath: RunDir + "/" + nginxconf.HotTierDir})
	}
	ports := []corev1.ContainerPort{
		{Name: "http", ContainerPort: spec.Listener.Port, Protocol: corev1.ProtocolTCP},
		{Name: cachepod.AgentPortName, ContainerPort: spec.Listener.AgentPort, Protocol: corev1.ProtocolTCP},
	}
	if len(tlsVolumes) > 0 {
		ports = slices.Insert(ports, 1, corev1.ContainerPort{Name: "https", ContainerPort: spec.Listener.TLSPort, Protocol: corev1.ProtocolTCP})
		if render.HTTP3(spec) {
			ports = slices.Insert(ports, 2, corev1.ContainerPort{Name: "h3", ContainerPort: spec.Listener.TLSPort, Protocol: corev1.ProtocolUDP})
		}
	}
	if spec.Sharding != nil {
		ports = append(ports, corev1.ContainerPort{Name: "peer", ContainerPort: spec.Sharding.PeerPort, Protocol: corev1.ProtocolTCP})
	}

	podSecurity := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](CacheUID),
		RunAsGroup:     ptr.To[int64](CacheUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if len(tlsVolumes) > 0 {
		// The Secrets' files are root's: group CacheUID may read them (tlsSecretMode).
		podSecurity.FSGroup = ptr.To[int64](CacheUID)
	}
	privileged := spec.Listener.StatusPort < 1024 // nginx's status, on the pod's loopback
	for _, p := range ports {
		privileged = privileged || p.ContainerPort < 1024
	}
	if privileged && !spec.HostNetwork {
		// Lets the non-root nginx (and agent) bind a privileged port, any of them (the
		// listener's, the TLS one, the peers'), inside the pod's own network namespace.
		podSecurity.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}
	}
	dnsPolicy := corev1.DNSClusterFirst
	if spec.HostNetwork {
		dnsPolicy = corev1.DNSClusterFirstWithHostNet
	}

	return &appsv1.DaemonSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      cachepod.DaemonSetName(cn),
			Namespace: cn.Namespace,
			Labels:    cachepod.ObjectLabels(cn),
		},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: cachepod.SelectorLabels(cn)},
			UpdateStrategy: spec.UpdateStrategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: cachepod.ObjectLabels(cn)},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					// Longer than nginx's worker_shutdown_timeout, so in-flight requests can finish.
					TerminationGracePeriodSeconds: ptr.To[int64](250),
					EnableServiceLinks:            ptr.To(false),
					HostNetwork:                   spec.HostNetwork,
					DNSPolicy:                     dnsPolicy,
					NodeSelector:                  spec.NodeSelector,
					PriorityClassName:             spec.PriorityClassName,
					Tolerations:                   spec.Tolerations,
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
							NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: diskRequirements(spec)}},
						},
					}},
					SecurityContext: podSecurity,
					InitContainers:  adoptDisksContainers(spec, image, diskMounts, diskPrefixes),
					Containers: []corev1.Container{{
						Name:    "cache",
						Image:   image,
						Command: []string{AgentCommand},
						Args:    agentArgs(cn, diskPrefixes),
						// The pod the operator's purge requests must name.
						Env:   agentEnv(spec),
						Ports: ports,
						// Ready once every disk passed its checks and nginx answers.
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/readyz", Port: intstr.FromString("metrics"),
							}},
							PeriodSeconds: 5,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/healthz", Port: intstr.FromString("metrics"),
							}},
							PeriodSeconds: 10, FailureThreshold: 3,
						},
						Resources:    cacheResources(spec),
						VolumeMounts: mounts,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: volumes,
				},
			},
		},
	}
}

// TLS volumes of the cache pods.
const (
	// tlsSecretMode lets the cache (group CacheUID, the pod's fsGroup) read the Secrets'
	// files, and nobody else: the files are root's, and the kubelet sets their group to
	// the fsGroup. 0444 would do without an fsGroup, but would let any user read the keys.
	tlsSecretMode = 0o440
	// tlsDirLimit bounds the memory-backed directory of the pairs nginx reads: 16 sites'
	// chains and keys take a few hundred KiB at most.
	tlsDirLimit = "4Mi"
)

// tlsVolumes are, when a site has tls, a Secret volume per such site, mounted read-only at
// agentapi.TLSSecretDir(site) for the agent, and the memory-backed directory where the
// agent copies the pairs nginx reads, so that no key lands on the node's disk. A Secret
// may be missing: optional, so the pod starts and serves the other sites while the
// agent reports it. They are sorted by site so that reordering sites rolls no pod; only
// adding or removing a site's tls, or renaming its Secret, changes the pod template.
func tlsVolumes(spec *v1alpha1.CacheNodeSpec) ([]corev1.Volume, []corev1.VolumeMount) {
	var sites []v1alpha1.Site
	for _, s := range spec.Sites {
		if s.TLS != nil {
			sites = append(sites, s)
		}
	}
	if len(sites) == 0 {
		return nil, nil
	}
	slices.SortFunc(sites, func(a, b v1alpha1.Site) int { return strings.Compare(a.Name, b.Name) })
	volumes := []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse(tlsDirLimit)),
	}}}}
	mounts := []corev1.VolumeMount{{Name: "tls", MountPath: RunDir + "/" + nginxconf.TLSDir}}
	for _, s := range sites {
		name := "tls-" + s.Name
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: s.TLS.SecretName,
			Items: []corev1.KeyToPath{
				{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey},
				{Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey},
			},
			DefaultMode: ptr.To[int32](tlsSecretMode),
			Optional:    ptr.To(true),
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: agentapi.TLSSecretDir(s.Name), ReadOnly: true})
	}
	return volumes, mounts
}

// desiredNetworkPolicy admits clients to the cache pods' listener port and, with a site
// with tls, its tlsPort (from listener.clientCIDRs, or from anywhere when it is unset),
// a sharded CacheNode's peer port only to its own pods, and the agent port only to the
// operator's pods and the scrapers in access; everything else that reaches the pods is
// dropped by a network plugin that enforces NetworkPolicy. With no such peer the agent
// port has no rule at all: a rule with no peers would admit every source. The kubelet's
// probes come from the pod's node, which NetworkPolicy does not filter. Network plugins do
// not apply NetworkPolicy to hostNetwork pods; the policy is written all the same, so
// turning hostNetwork off never leaves the pods open.
func desiredNetworkPolicy(cn *v1alpha1.CacheNode, access AgentAccess) *networkingv1.NetworkPolicy {
	l := &cn.Spec.Listener
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	ports := func(port int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(port))}}
	}
	clients := networkingv1.NetworkPolicyIngressRule{Ports: ports(l.Port)}
	if hasTLS(&cn.Spec) {
		clients.Ports = append(clients.Ports, ports(l.TLSPort)...)
		if render.HTTP3(&cn.Spec) { // QUIC
			clients.Ports = append(clients.Ports, networkingv1.NetworkPolicyPort{Protocol: &udp, Port: ptr.To(intstr.FromInt32(l.TLSPort))})
		}
	}
	for _, cidr := range l.ClientCIDRs {
		clients.From = append(clients.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
	}
	ingress := []networkingv1.NetworkPolicyIngressRule{clients}
	if s := cn.Spec.Sharding; s != nil {
		// The peer port: the CacheNode's own pods only (this namespace's pods with all its
		// labels, managed-by included, which the admission policy lets only its DaemonSet's
		// controller give a pod).
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{Ports: ports(s.PeerPort),
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: cachepod.ObjectLabels(cn)}}}})
	}

	var agentPeers []networkingv1.NetworkPolicyPeer
	if access.OperatorNamespace != "" {
		agentPeers = append(agentPeers, peer(Peer{
			NamespaceLabels: map[string]string{NamespaceNameLabel: access.OperatorNamespace},
			PodLabels:       access.OperatorPodLabels,
		}))
	}
	for _, p := range access.Scrapers {
		if len(p.NamespaceLabels) > 0 { // ParsePeer requires them; an empty selector admits every namespace
			agentPeers = append(agentPeers, peer(p))
		}
	}
	if len(agentPeers) > 0 {
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{Ports: ports(l.AgentPort), From: agentPeers})
	}

	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      cachepod.NetworkPolicyName(cn),
			Namespace: cn.Namespace,
			Labels:    cachepod.ObjectLabels(cn),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: cachepod.SelectorLabels(cn)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     ingress,
		},
	}
}

// hasTLS says whether a site has tls, and so whether the cache listens on tlsPort.
func hasTLS(spec *v1alpha1.CacheNodeSpec) bool {
	return slices.ContainsFunc(spec.Sites, func(s v1alpha1.Site) bool { return s.TLS != nil })
}

// peer selects the pods of p in the namespaces of p; no pod labels select all of them.
func peer(p Peer) networkingv1.NetworkPolicyPeer {
	np := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(p.NamespaceLabels)},
		PodSelector:       &metav1.LabelSelector{},
	}
	if len(p.PodLabels) > 0 {
		np.PodSelector.MatchLabels = maps.Clone(p.PodLabels)
	}
	return np
}

// agentEnv is what the agent learns from the pod: its name, which the operator's purges
// must name, and with hostNetwork its address, the only one the agent port listens on.
func agentEnv(spec *v1alpha1.CacheNodeSpec) []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{field("POD_NAMESPACE", "metadata.namespace"), field("POD_NAME", "metadata.name")}
	if spec.HostNetwork {
		env = append(env, field("POD_IP", "status.podIP"))
	}
	return env
}

// adoptDisksContainers make a fresh disk usable by the cache without manual steps: a new
// filesystem's root directory belongs to root. The step runs the agent's disk checks as
// root with no capability but CAP_CHOWN, and changes only the owner of a disk root that
// passed them and holds nothing but lost+found (see agent.DiskChecker.AdoptFreshDisk).
// It checks the disks against the same allowlist as the agent. With diskAdoption Prepared
// there is no such step, and nothing in the pod runs as root. It has the cache container's
// resources: a container without them would make a pod whose requests equal its limits
// Burstable instead of Guaranteed, and the pod's requests stay the cache container's.
func adoptDisksContainers(spec *v1alpha1.CacheNodeSpec, image string, diskMounts []corev1.VolumeMount, diskPrefixes []string) []corev1.Container {
	if spec.DiskAdoption == v1alpha1.DiskAdoptionPrepared {
		return nil
	}
	args := append([]string{"--adopt-fresh-disks", fmt.Sprintf("--cache-uid=%d", CacheUID), allowedPrefixesArg(spec, diskPrefixes)}, diskArgs(spec)...)
	return []corev1.Container{{
		Name:         "adopt-disks",
		Image:        image,
		Command:      []string{AgentCommand},
		Args:         args,
		VolumeMounts: diskMounts,
		Resources:    cacheResources(spec),
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsGroup:               ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"},
				Add:  []corev1.Capability{"CHOWN"},
			},
		},
	}}
}

// hotTierLimit is the size of a sharded CacheNode's hot tier volume, nil without one.
func hotTierLimit(spec *v1alpha1.CacheNodeSpec) *resource.Quantity {
	if spec.Sharding == nil || spec.Sharding.HotTier == nil {
		return nil
	}
	return resource.NewQuantity(spec.Sharding.HotTier.VolumeBytes(), resource.BinarySI)
}

// Default requests of the cache container, beside the keys zones: what nginx's workers
// (buffers, open files) and the agent use, the CPU to serve, and the logs and run directory.
var (
	baseMemoryRequest       = resource.MustParse("128Mi")
	defaultCPURequest       = resource.MustParse("500m")
	defaultEphemeralRequest = resource.MustParse("128Mi")
)

// cacheResources are the cache container's resources: the spec's, with every request the
// spec leaves out defaulted from what it implies, so that the kubelet does not treat the
// cache as BestEffort, the first pod to evict. A resource with a limit but no request is
// left alone: the API server sets its request to the limit.
func cacheResources(spec *v1alpha1.CacheNodeSpec) corev1.ResourceRequirements {
	res := *spec.Resources.DeepCopy()
	memory := baseMemoryRequest.DeepCopy()
	for _, d := range spec.Disks {
		if d.KeysZoneSize != nil {
			memory.Add(*d.KeysZoneSize) // shared memory nginx maps in full and fills as keys arrive
		}
	}
	memory.Add(*render.ClientLimitsMemory(spec)) // the client limits' tables, shared memory as the keys zones
	if limit := hotTierLimit(spec); limit != nil {
		memory.Add(*limit) // the hot tier's tmpfs
		memory.Add(*resource.NewQuantity(v1alpha1.HotTierKeysZone, resource.BinarySI))
	}
	defaults := corev1.ResourceList{
		corev1.ResourceMemory:           memory,
		corev1.ResourceCPU:              defaultCPURequest,
		corev1.ResourceEphemeralStorage: defaultEphemeralRequest,
	}
	for name, q := range defaults {
		_, requested := res.Requests[name]
		_, limited := res.Limits[name]
		if requested || limited {
			continue
		}
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Requests[name] = q
	}
	return res
}

// agentArgs tell the node agent where the configuration is and which disks to check.
// They change only with the pod's shape, like the rest of the pod template.
// The agent checks the disks against the allowed prefixes they lie under (not the whole
// allowlist, so that allowing one more prefix rolls no pod).
func agentArgs(cn *v1alpha1.CacheNode, diskPrefixes []string) []string {
	args := []string{
		"--cache-node=" + cn.Namespace + "/" + cn.Name,
		"--pod=$(POD_NAMESPACE)/$(POD_NAME)",
		"--config-dir=" + ConfigDir,
		"--announced-config-hash-file=" + agentapi.AnnouncementDir + "/" + agentapi.AnnouncedHashFile,
		"--run-dir=" + RunDir,
		fmt.Sprintf("--listen=:%d", cn.Spec.Listener.AgentPort),
		allowedPrefixesArg(&cn.Spec, diskPrefixes),
	}
	if cn.Spec.HostNetwork {
		// In the node's network namespace, the agent port on the node's own address only,
		// not on every address of the node (its loopback, other interfaces).
		args = append(args, "--listen-ip=$(POD_IP)")
	}
	return append(args, diskArgs(&cn.Spec)...)
}

// allowedPrefixesArg passes the agent the cluster admin's prefixes its disks lie under.
func allowedPrefixesArg(spec *v1alpha1.CacheNodeSpec, diskPrefixes []string) string {
	var under []string
	for _, d := range spec.Disks {
		if p := render.DiskPrefix(d.Path, diskPrefixes); p != "" && !slices.Contains(under, p) {
			under = append(under, p)
		}
	}
	slices.Sort(under)
	return "--allowed-disk-prefixes=" + strings.Join(under, ",")
}

// diskArgs declare the disks to the agent.
func diskArgs(spec *v1alpha1.CacheNodeSpec) []string {
	args := make([]string, len(spec.Disks))
	for i, d := range spec.Disks {
		args[i] = fmt.Sprintf("--disk=name=%s,path=%s,media=%s", d.Name, d.Path, d.Media)
		if d.TakeOverFrom != "" {
			args[i] += ",takeOverFrom=" + d.TakeOverFrom
		}
	}
	return args
}

// diskRequirements are the node-affinity expressions that admit only nodes with the
// declared disks: with edgepool's labels, "n disks of a media" becomes count > n-1.
func diskRequirements(spec *v1alpha1.CacheNodeSpec) []corev1.NodeSelectorRequirement {
	counts := map[v1alpha1.Media]int{}
	for _, d := range spec.Disks {
		counts[d.Media]++
	}
	var reqs []corev1.NodeSelectorRequirement
	for _, m := range []v1alpha1.Media{v1alpha1.MediaNVMe, v1alpha1.MediaSSD, v1alpha1.MediaHDD} {
		n := counts[m]
		if n == 0 {
			continue
		}
		if spec.DiskLabels == v1alpha1.DiskLabelsNFD {
			// NFD only says "has non-rotational disks"; it has no counts and no HDD label.
			if m != v1alpha1.MediaHDD && !containsKey(reqs, NFDNonRotationalLabel) {
				reqs = append(reqs, corev1.NodeSelectorRequirement{
					Key: NFDNonRotationalLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
				})
			}
			continue
		}
		reqs = append(reqs, corev1.NodeSelectorRequirement{
			Key: DiskLabel(m), Operator: corev1.NodeSelectorOpGt, Values: []string{strconv.Itoa(n - 1)},
		})
	}
	return reqs
}

// DiskLabel is the node label that counts a node's disks of one media.
func DiskLabel(m v1alpha1.Media) string {
	return DiskLabelPrefix + strings.ToLower(string(m))
}

func containsKey(reqs []corev1.NodeSelectorRequirement, key string) bool {
	for _, r := range reqs {
		if r.Key == key {
			return true
		}
	}
	return false
}

// describeRequirement says what a disk requirement asks of a node, for status messages.
func describeRequirement(r corev1.NodeSelectorRequirement) string {
	if r.Operator == corev1.NodeSelectorOpGt && len(r.Values) == 1 {
		n, _ := strconv.Atoi(r.Values[0])
		return fmt.Sprintf("%s>=%d", r.Key, n+1)
	}
	return fmt.Sprintf("%s=%s", r.Key, strings.Join(r.Values, ","))
}
