# edgepool — see README.md. Every tool is installed by this Makefile into bin/, one
# folder per version, and reused when present (see ../shared/TOOLCHAIN.md for why
# nothing is downloaded from release pages).

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

K8S_VERSION            ?= 1.36.3
CONTROLLER_GEN_VERSION ?= v0.20.1

LOCALBIN       ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen
# The local cluster's binaries: the Kubernetes ones, kwok and Helm, all built from one module
# (hack/tools/kube, which pins their versions) into one folder.
KUBE_BIN       ?= $(LOCALBIN)/k8s-v$(K8S_VERSION)
KWOK_BIN       ?= $(KUBE_BIN)
HELM_BIN       ?= $(KUBE_BIN)
# golangci-lint and its module plugins are pinned in hack/tools/lint/go.mod. The folder is
# named by the golangci-lint version plus a digest of that module (go.sum, main.go), so a
# plugin bump builds a new binary instead of reusing a stale one.
GOLANGCI_LINT_VERSION := $(shell awk '$$1 == "github.com/golangci/golangci-lint/v2" { print $$2 }' hack/tools/lint/go.mod)
GOLANGCI_LINT_ID      := $(shell cat hack/tools/lint/go.sum hack/tools/lint/main.go | sha256sum | cut -c1-8)
GOLANGCI_LINT  ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)-$(GOLANGCI_LINT_ID)/golangci-lint
CLUSTER_TOOLS   = $(addprefix $(KUBE_BIN)/,kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kwok kwokctl helm)
# envtest reads kube-apiserver and etcd from this folder.
ENVTEST_ASSETS ?= $(KUBE_BIN)
KUBE_LDFLAGS    = -s -w -X k8s.io/component-base/version.gitVersion=v$(K8S_VERSION) \
                  -X k8s.io/component-base/version.gitMajor=1 \
                  -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION)))

# Files produced by `make manifests generate`; `make verify` fails when they drift.
CHART = charts/edgepool
GENERATED = api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/role.yaml \
	$(CHART)/crds $(CHART)/files/role.yaml $(CHART)/files/pod_annotation_policy.yaml $(CHART)/files/owned_objects_policy.yaml $(CHART)/files/managed_objects_policy.yaml \
	$(CHART)/files/cachepurge_viewer_role.yaml $(CHART)/files/cachepurge_editor_role.yaml \
	$(CHART)/files/disk_paths_policy.yaml $(CHART)/files/grants_policy.yaml $(CHART)/files/pod_monitor.yaml $(CHART)/files/alerts.yaml \
	$(CHART)/files/edgepool-cache.json

GO_TEST_FLAGS ?= -count=1 -timeout=30m

.PHONY: all
all: build

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and the manager's ClusterRole from kubebuilder markers (and the chart's copies).
	$(CONTROLLER_GEN) rbac:roleName=edgepool-manager crd paths="./api/...;./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	mkdir -p $(CHART)/crds $(CHART)/files
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/role.yaml
	cp config/rbac/pod_annotation_policy.yaml $(CHART)/files/pod_annotation_policy.yaml
	cp config/rbac/owned_objects_policy.yaml config/rbac/managed_objects_policy.yaml $(CHART)/files/
	cp config/rbac/cachepurge_viewer_role.yaml config/rbac/cachepurge_editor_role.yaml $(CHART)/files/
	cp config/policy/disk_paths_policy.yaml config/policy/grants_policy.yaml $(CHART)/files/
	cp config/prometheus/pod_monitor.yaml config/prometheus/alerts.yaml config/grafana/edgepool-cache.json $(CHART)/files/

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -w $$(git ls-files '*.go' | grep -v '^hack/tools/')

.PHONY: verify
verify: $(CONTROLLER_GEN) ## Fail if generated files, formatting or go.mod are out of date.
	@before=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	$(MAKE) --no-print-directory manifests generate >/dev/null; \
	after=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "verify: generated files were out of date; they are regenerated now, commit them:"; \
		diff <(echo "$$before") <(echo "$$after"); exit 1; fi
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/')); \
	if [ -n "$$unformatted" ]; then echo "verify: not gofmt'ed: $$unformatted"; exit 1; fi
	go mod tidy -diff
	go vet ./...
	cd test/bench && go mod tidy -diff && go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (with kube-api-linter and logcheck; see .golangci.yml) on the root module and the benchmarks'.
	$(GOLANGCI_LINT) run ./...
	cd test/bench && $(GOLANGCI_LINT) run ./...

##@ Build

.PHONY: build
build: ## Build the operator, the node agent and the CLI into bin/.
	go build -o $(LOCALBIN)/manager ./cmd/manager
	go build -o $(LOCALBIN)/edgepool-agent ./cmd/agent
	go build -o $(LOCALBIN)/edgepool ./cmd/edgepool

##@ Images

# The images as reproducible OCI archives (the same inputs give the same digests), built
# without a Docker engine by hack/tools/images from images/*/image.json. Load one into a
# node with `ctr -n k8s.io images import bin/images/cache.tar`. The Debian packages the
# cache image unpacks are downloaded once into $(IMAGES_DIR)/debs and reused: delete
# them to take Debian's newer versions.
IMAGES_DIR    ?= $(LOCALBIN)/images
# A registry, host[:port][/path], that `make images` also pushes the operator and cache
# images to (credentials: the Docker config), e.g. REGISTRY=registry.example.com/edge; it
# prints each pushed image pinned by digest, for the chart's image and cacheImage values.
REGISTRY      ?=
IMAGE_GOBUILD  = CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false -ldflags='-s -w'

.PHONY: images
images: ## Build the operator, cache and pause images (and the e2e suite's filler) as OCI archives into bin/images/ (no Docker engine needed).
	@mkdir -p $(IMAGES_DIR)/inputs
	cd hack/tools/images && go build -o $(IMAGES_DIR)/imagebuild .
	$(IMAGE_GOBUILD) -o $(IMAGES_DIR)/inputs/manager ./cmd/manager
	$(IMAGE_GOBUILD) -o $(IMAGES_DIR)/inputs/edgepool-agent ./cmd/agent
	$(IMAGE_GOBUILD) -o $(IMAGES_DIR)/inputs/pause ./hack/node/pause
	$(IMAGE_GOBUILD) -o $(IMAGES_DIR)/inputs/filler ./test/e2e/filler
	@for spec in images/operator images/cache images/pause test/e2e/filler; do \
		push=; case $$spec in images/operator|images/cache) push="$(if $(REGISTRY),-push $(REGISTRY))";; esac; \
		$(IMAGES_DIR)/imagebuild -spec $$spec/image.json -inputs $(IMAGES_DIR)/inputs \
			-debs $(IMAGES_DIR)/debs -download -out $(IMAGES_DIR)/$$(basename $$spec).tar $$push || exit 1; \
	done

##@ Local cluster

.PHONY: demo
demo: cluster-tools images ## A local control plane, fake disk-labelled nodes, a real node, the operator installed with Helm, real cache pods (KEEP=1 keeps it).
	go build -o $(LOCALBIN)/demotool ./hack/demo/demotool
	KUBE_BIN=$(KUBE_BIN) IMAGES_DIR=$(IMAGES_DIR) hack/demo/demo.sh

.PHONY: demo-down
demo-down: ## Stop what a demo left running.
	go build -o $(LOCALBIN)/demotool ./hack/demo/demotool
	KUBE_BIN=$(KUBE_BIN) hack/demo/demo.sh down

.PHONY: cluster-tools
cluster-tools: $(CLUSTER_TOOLS) $(KUBE_BIN)/etcd ## Build or reuse the local cluster's binaries (Kubernetes, kwok, Helm).

.PHONY: render
render: ## Render the sample CacheNode to nginx.conf, offline.
	go run ./cmd/edgepool render -f config/samples/cache_v1alpha1_cachenode.yaml

.PHONY: run
run: manifests generate ## Run the operator against the cluster in $KUBECONFIG.
	go run ./cmd/manager

KUBECTL ?= kubectl

.PHONY: install
install: manifests ## Install the CRDs into the cluster in $KUBECONFIG.
	$(KUBECTL) apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: ## Remove the CRDs (and every CacheNode) from the cluster in $KUBECONFIG.
	$(KUBECTL) delete --ignore-not-found -f config/crd/bases

.PHONY: deploy
deploy: manifests ## Deploy the operator with kustomize (config/default) to the cluster in $KUBECONFIG.
	$(KUBECTL) apply --server-side -k config/default

.PHONY: undeploy
undeploy: ## Remove what make deploy applied.
	$(KUBECTL) delete --ignore-not-found -k config/default

.PHONY: docker-build
docker-build: ## Build the operator and cache images (needs a Docker engine).
	docker build -f images/operator/Dockerfile -t edgepool/operator:0.1.0 .
	docker build -f images/cache/Dockerfile -t edgepool/cache:0.1.0 .

##@ Test

TEST_ENV = KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KUBE_BIN=$(KUBE_BIN) KWOK_BIN=$(KWOK_BIN) HELM_BIN=$(HELM_BIN) NGINX_BIN=$(NGINX_BIN) IMAGES_DIR=$(IMAGES_DIR)

.PHONY: test
test: verify lint test-tools ## Run every test: unit, golden files by nginx -t, envtest, agent with nginx, e2e on a local cluster.
	$(TEST_ENV) go test $(GO_TEST_FLAGS) ./...
	cd test/bench && $(TEST_ENV) go test -p 1 $(GO_TEST_FLAGS) ./...
	$(MAKE) --no-print-directory test-monitoring test-imagebuild

# The benchmarks' smoke tests (test/bench, a module of its own: its load generator and
# charts stay out of the product's dependencies). One package at a time (-p 1): each
# loads the 2 CPUs with real nginx, emulated disks and control planes, and the disk
# scenarios' smoke checks that every request was served from the emulated disks.
.PHONY: test-bench
test-bench: test-tools ## Run the benchmark scenarios' smoke tests (small, no performance assertion).
	cd test/bench && $(TEST_ENV) go test -p 1 $(GO_TEST_FLAGS) ./...

# The fast layer, for the edit loop: unit tests, the golden files checked by nginx -t,
# and the controller against a real kube-apiserver (envtest).
UNIT_PACKAGES = ./api/... ./cmd/... ./controllers/... ./internal/...

.PHONY: test-unit
test-unit: $(ENVTEST_ASSETS)/kube-apiserver $(KUBE_BIN)/etcd nginx ## Run the fast layer: unit, golden files by nginx -t, envtest (under a minute warm).
	$(TEST_ENV) go test $(GO_TEST_FLAGS) $(UNIT_PACKAGES)
	$(MAKE) --no-print-directory test-monitoring

# The alerts and the dashboard, by Prometheus' parser and engine, in a module of their own
# (test/monitoring/go.mod) so that Prometheus stays out of the product's dependencies.
.PHONY: test-monitoring
test-monitoring: ## Parse the alerts' and the dashboard's PromQL and evaluate two alerts on synthetic series.
	cd test/monitoring && go vet ./... && go test $(GO_TEST_FLAGS) ./...

# The image builder's own tests (its module, hack/tools/images), e.g. a push to a registry.
.PHONY: test-imagebuild
test-imagebuild: ## Test the image builder, pushing to a registry served in the test.
	cd hack/tools/images && go vet ./... && go test $(GO_TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: test-tools ## Run the e2e suite on a local kwok cluster (real scheduler, DaemonSet controller, garbage collector).
	$(TEST_ENV) go test $(GO_TEST_FLAGS) -v ./test/e2e/

.PHONY: bench
bench: test-tools ## Go benchmarks, then C1 (control plane), C2 (reloads), F1 (a failing disk), P1 (purge fan-out), C3 (a 5,000-node kwok fleet), T1 (TLS), S1 (one cache across 10 nodes) and D1-D5 (emulated disks, open loop in D1, D2 and D5): tables and charts in tmp/bench (needs root, /dev/fuse).
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) NGINX_BIN=$(NGINX_BIN) go test -run '^$$' -bench . -benchmem ./internal/render/ ./internal/agent/ ./controllers/...
	cd test/bench && go build -o $(LOCALBIN)/edgepool-bench ./cmd/edgepool-bench
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KUBE_BIN=$(KUBE_BIN) KWOK_BIN=$(KWOK_BIN) $(LOCALBIN)/edgepool-bench -nginx $(NGINX_BIN) -out tmp/bench $(BENCH_FLAGS)

# The soak (test/agent's TestSoak, which make test runs for 20 s): SOAK long at SOAK_RATE
# requests per second, open loop, on real disks (loop devices: needs root).
SOAK ?= 30m
SOAK_RATE ?= 150
SOAK_TIMEOUT ?= 2h
.PHONY: soak
soak: nginx ## Soak the real agent and nginx on real disks for SOAK (30m) under steady load while they reload, purge, lose and regain a disk, renew a certificate and restart.
	$(TEST_ENV) go test -count=1 -timeout=$(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./test/agent -soak $(SOAK) -soak-rate $(SOAK_RATE)

.PHONY: test-tools
test-tools: $(ENVTEST_ASSETS)/kube-apiserver $(KUBE_BIN)/etcd cluster-tools nginx images ## Install what the tests need.

##@ Tools

$(CONTROLLER_GEN):
	GOBIN=$(dir $@) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# The cluster's binaries come from one module (hack/tools/kube): k8s.io/kubernetes' commands,
# kwok's and Helm's, on one set of Kubernetes libraries. One `go build` compiles what they
# share once and links them side by side; a change to the module's pins rebuilds them.
$(CLUSTER_TOOLS) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	cd hack/tools/kube && go build -ldflags '$(KUBE_LDFLAGS)' -o $(KUBE_BIN)/ \
		$(addprefix k8s.io/kubernetes/cmd/,kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy) \
		sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl helm.sh/helm/v3/cmd/helm
	@touch $(CLUSTER_TOOLS)

# golangci-lint with the kubeapilinter and logcheck module plugins compiled in, built from
# its own module (hack/tools/lint) because `golangci-lint custom` clones from GitHub.
$(GOLANGCI_LINT):
	cd hack/tools/lint && go build -o $@ .

# etcd is built from its module too (go.etcd.io/etcd/server/v3, in hack/tools/kube), and
# envtest finds it next to kube-apiserver. Debian's etcd (3.4.23) lacks the watch progress
# requests kube-apiserver 1.36 needs to stream a watch's initial list: every client's
# watches failed and were listed again, and kwok saw a new pod 15-25 s late. An earlier
# bin/ held a symlink to Debian's etcd here: it is removed, not written through.
$(KUBE_BIN)/etcd: hack/tools/kube/go.mod hack/tools/kube/go.sum
	rm -f $@
	cd hack/tools/kube && go build -ldflags '-s -w' -o $@ go.etcd.io/etcd/server/v3

# The tests run the cache image's own nginx on this machine (Debian 13's, see
# images/cache/packages.txt): its packages unpacked into NGINX_DIR, nginx pointed at their
# loader and libraries (patchelf), as the machine's libc may be older than they need.
# NGINX_DIR is outside the checkout, where the agent tests' unprivileged user may run it.
NGINX_DIR ?= /usr/local/lib/edgepool-nginx
NGINX_BIN  = $(NGINX_DIR)/usr/sbin/nginx

.PHONY: nginx
nginx: system-packages ## Unpack the cache image's nginx (and the libraries it loads) into NGINX_DIR for the tests.
	@mkdir -p $(IMAGES_DIR)
	cd hack/tools/images && go build -o $(IMAGES_DIR)/imagebuild .
	$(IMAGES_DIR)/imagebuild -spec images/cache/image.json -debs $(IMAGES_DIR)/debs -download -extract $(NGINX_DIR)
	@if [ "$$(patchelf --print-interpreter $(NGINX_BIN))" != "$(NGINX_DIR)/usr/lib64/ld-linux-x86-64.so.2" ]; then \
		patchelf --set-interpreter $(NGINX_DIR)/usr/lib64/ld-linux-x86-64.so.2 --force-rpath --set-rpath $(NGINX_DIR)/usr/lib/x86_64-linux-gnu $(NGINX_BIN); \
	fi
	@$(NGINX_BIN) -V 2>&1 | grep -q -- --with-threads || { echo "$(NGINX_BIN) lacks --with-threads"; exit 1; }

.PHONY: system-packages
system-packages: ## Install curl, wrk, openssl, patchelf and the real node's containerd, runc, CNI plugins and iptables from Debian when missing.
	@if ! command -v curl >/dev/null || ! command -v wrk >/dev/null || ! command -v openssl >/dev/null || ! command -v patchelf >/dev/null \
		|| ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! test -x /usr/lib/cni/bridge || ! command -v iptables >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl wrk openssl patchelf \
			containerd runc containernetworking-plugins iptables >/dev/null; \
	fi

.PHONY: clean
clean: ## Remove built binaries (tools stay in bin/ for reuse).
	rm -f $(LOCALBIN)/manager $(LOCALBIN)/edgepool $(LOCALBIN)/edgepool-agent $(LOCALBIN)/demotool

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
