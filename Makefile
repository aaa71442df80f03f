# toolgate — see README.md. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= toolgate.dev/toolgate:dev
CACHE ?= $(or $(TOOLGATE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/toolgate)
export TOOLGATE_CACHE := $(CACHE)
GOLANGCI_LINT_VERSION ?= $(shell awk '$$1=="github.com/golangci/golangci-lint/v2"{print $$2}' hack/tools/go.mod)
GOLANGCI_LINT := $(CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)
CONTROLLER_GEN := go tool controller-gen

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC (and the namespaced install's Roles from the ClusterRole).
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/namespacedroles
	go run ./hack/chartsync
	go run ./hack/apiref
	go run ./hack/dashboard

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(CACHE)
	cd hack/tools && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: verify
verify: generate manifests fmt ## Regenerate and fail on drift (diff or new untracked files).
	@hack/verify-clean.sh

.PHONY: envtest-bins
envtest-bins: ## Build kube-apiserver, etcd and kubectl from source (cached).
	hack/build-k8s.sh kube-apiserver etcd kubectl

.PHONY: helm
helm: ## Build helm from source into the cache (once; hack/build-helm.sh).
	hack/build-helm.sh

HELM_CHECK_VALUES := --set rbac.scope=namespaced --set 'rbac.watchNamespaces={agents,team-b}' --set metrics.serviceMonitor.enabled=true \
  --set metrics.prometheusRule.enabled=true \
  --set gateway.enabled=true --set 'gateway.impersonateNamespaces={agents}'

.PHONY: helm-check
helm-check: helm ## helm lint and helm template charts/toolgate in both scopes (test/chart compares it with config/).
	h=$$(hack/build-helm.sh | tail -1); \
	  $$h lint --strict charts/toolgate; \
	  $$h lint --strict charts/toolgate $(HELM_CHECK_VALUES); \
	  $$h template toolgate charts/toolgate --namespace toolgate-system >/dev/null; \
	  $$h template toolgate charts/toolgate --namespace toolgate-system $(HELM_CHECK_VALUES) \
	    --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy >/dev/null

.PHONY: jaeger
jaeger: ## Build Jaeger (the e2e suite's OTLP receiver) from source into the cache (once; hack/build-jaeger.sh).
	hack/build-jaeger.sh

.PHONY: promtool
promtool: ## Build promtool from source into the cache (once; hack/build-promtool.sh).
	hack/build-promtool.sh

.PHONY: test
# The suites the race detector slows most (minutes of envtest each) run
# without it in make test; make test-race runs them under it too.
RACE_SLOW := /(internal/controller|test/apicontract|test/chart)$$

test: envtest-bins helm promtool ## Run every test: unit and envtest (real kube-apiserver), and promtool on the alerts; all but the three longest envtest suites under the race detector.
	go test -race -count=1 -v $$(go list ./... | grep -v -E '$(RACE_SLOW)')
	go test -count=1 -v $$(go list ./... | grep -E '$(RACE_SLOW)')

.PHONY: test-race
test-race: envtest-bins helm promtool ## Every package under the race detector, the three envtest suites make test runs without it included (README).
	go test -race ./... -count=1

.PHONY: test-slow-approval
test-slow-approval: envtest-bins ## A person approves after 310 s while the TypeScript MCP client waits with Node's default HTTP timeouts (300 s); make test runs it scaled down.
	TOOLGATE_SLOW_APPROVAL=1 go test ./internal/gateway/ -count=1 -run TestGateway -args -ginkgo.focus='waits for a person'

##@ Local cluster and demo

.PHONY: test-e2e
test-e2e: ## Run the e2e suite and the short chaos run on the local cluster (real pods), then remove the cluster.
	hack/build-jaeger.sh
	hack/cluster-up.sh
	hack/images.sh
	hack/deploy.sh
	rc=0; go test -tags e2e ./test/e2e/ -count=1 -timeout 30m -v -ginkgo.v || rc=$$?; \
	  go run ./hack/chaos -short || rc=$$?; \
	  hack/cluster-down.sh; exit $$rc

.PHONY: test-e2e-nodes
test-e2e-nodes: ## Run the e2e suite and the short chaos run on a local cluster of two nodes (its node specs drain and lose the second while calls run there), then remove the cluster.
	TOOLGATE_NODES=2 $(MAKE) test-e2e

.PHONY: test-quickstart
test-quickstart: ## Run docs/quickstart.md as written on the local cluster (helm install, an upgrade, helm uninstall leaves nothing), then remove the cluster.
	hack/cluster-up.sh
	hack/images.sh
	rc=0; go test -tags e2e ./test/quickstart/ -count=1 -timeout 20m -v || rc=$$?; hack/cluster-down.sh; exit $$rc

.PHONY: chaos
chaos: ## Faults on the local cluster under load (at least 200 calls, 20 manager SIGKILLs, restarts of every component, the API server throttling and failing, node pressure, a node lost); prints each fault with its recovery time.
	hack/cluster-up.sh
	hack/images.sh
	hack/deploy.sh
	rc=0; go run ./hack/chaos $(CHAOS_ARGS) || rc=$$?; hack/cluster-down.sh; exit $$rc

.PHONY: bench
bench: ## On the local cluster, N sequential calls of each kind (cold with the runner injected, in the image, built-in, an MCP server's tool; warm, and an MCP server's tool warm) against N bare pods: p50/p95, ratios, distinct pods, where a cold call's time goes, a warm call's hops (from the manager's spans) against its targets; a turn of 16 parallel cold calls on one node and on every node, side by side.
	hack/cluster-up.sh
	hack/images.sh
	hack/deploy.sh
	go run ./hack/bench -kubeconfig $${TOOLGATE_CLUSTER_DIR:-/var/tmp/toolgate-cluster}/kubeconfig/admin.kubeconfig -n $${N:-20}

.PHONY: throughput
throughput: envtest-bins ## Throughput against the API server's write limit on envtest (limit, calls/s for one session and many, writes per call, 50-call makespan, the hops that bound one session, the scale curve over 1 to 1,000 sessions, a session's size as its turn grows); LONG=10000 adds a sustained run with memory figures, TTL=0 with retention.
	go run ./hack/throughput -long $${LONG:-0} -ttl $${TTL:--1}

.PHONY: demo
demo: ## Bring up the local cluster, install toolgate, run two turns of tool calls, print the transcript.
	hack/demo.sh

.PHONY: demo-down
demo-down: cluster-down ## Remove everything the demo started.

.PHONY: cluster-up
cluster-up: ## Start the local single-node cluster (built from source, cached).
	hack/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove its processes, mounts, bridge and state.
	hack/cluster-down.sh

.PHONY: images
images: ## Build the images without a Docker engine and import them into the local cluster.
	hack/images.sh

##@ Build

.PHONY: build
build: ## Build the manager binary.
	CGO_ENABLED=0 go build -trimpath -o bin/manager ./cmd/manager

.PHONY: run
run: ## Run the manager against the current kubeconfig.
	go run ./cmd/manager --leader-elect=false

.PHONY: kustomize-check
kustomize-check: ## Render config/default and config/namespaced with the source-built kubectl.
	dir=$$(hack/build-k8s.sh kubectl | tail -1); for c in default namespaced; do $$dir/kubectl kustomize config/$$c >/dev/null; done
