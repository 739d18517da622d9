# tollgate — see README.md. Every target is idempotent; tools are cached outside the repository
# (shared by every clone on the machine), keyed by version: see scripts/install-tools.sh.
SHELL := /bin/bash
GO ?= go
TOOLS_DIR ?= $(or $(TOLLGATE_TOOLS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tollgate/tools)
TINYGO_VERSION ?= 0.41.1
TINYGO ?= $(TOOLS_DIR)/tinygo-$(TINYGO_VERSION)/bin/tinygo
TOLLGATE_TOOLS_DIR := $(TOOLS_DIR)
export TINYGO TINYGO_VERSION TOLLGATE_TOOLS_DIR

.PHONY: e2e crds all build demo-modules bench-server bench-shadow bench-rounds bench-engines bench-operator bench-capabilities policies test test-modules bench check tools clean demo map-tinygo map-tinygo-engine

# Go modules besides the root one (each policy and the SDK is its own module).
SUBMODULES := sdk $(patsubst %/go.mod,%,$(wildcard examples/*/go.mod policies/*/go.mod test/testdata/policies/*/go.mod test/*/go.mod))
GOTEST_FLAGS ?= -timeout 40m

all: build

# The binary is built static and with -trimpath, as `make image` builds it, so that the image's
# build (and internal/tools/mkimage's test of it) finds every package in the build cache.
build: demo-modules
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/tollgate ./cmd/tollgate

# demo-modules copies the built example policies into internal/demo/modules, which the
# binary embeds for `tollgate serve` without configuration (see docs/server.md).
DEMO_EXAMPLES := capabilities-drop required-labels raw-validation
demo-modules:
	@mkdir -p internal/demo/modules
	@for d in $(DEMO_EXAMPLES); do \
		if [ -f examples/$$d/policy.wasm ]; then cmp -s examples/$$d/policy.wasm internal/demo/modules/$$d.wasm || cp examples/$$d/policy.wasm internal/demo/modules/$$d.wasm; \
		else echo "demo-modules: examples/$$d/policy.wasm not built (make policies)" >&2; fi; done

# demo builds only what it shows (the example policies scripts/demo.sh runs, the built-in policies
# the binary embeds, tollgate) with only the tools those need, and runs the examples through
# tollgate on their sample requests. Policies come from the build cache when another clone or an
# earlier run built them (scripts/build-policies.sh); everything else is built by the targets that
# use it (make policies, make test).
DEMO_POLICIES := $(addprefix examples/,$(DEMO_EXAMPLES) go-image-registries) policies/mutating-admission-policy policies/gatekeeper-mutation
.PHONY: demo-policies
demo-policies:
	./scripts/build-policies.sh --no-wasm-opt $(DEMO_POLICIES)
	./scripts/embed-builtins.sh

demo: demo-policies build
	./scripts/demo.sh

# demo-cluster brings up the one-node cluster of the end-to-end tests (a real kubelet and
# containerd, in namespaces of their own; root needed), installs the chart with helm, applies two
# example policies and shows a denial and a mutation from kubectl, then keeps the cluster up until
# Ctrl-C, which tears it all down (DEMO_EXIT=1: at once). See README.md and docs/operator.md.
.PHONY: demo-cluster
demo-cluster: policies build image
	@set -e; $(k8s-env) \
	cd test/e2e && $(GO) build -o ../../bin/democluster ./democluster && cd ../.. && exec bin/democluster

# tools installs what building the policies and running the tests needs (apt packages, TinyGo).
tools:
	./scripts/install-tools.sh

# k8s-tools builds kube-apiserver, kubectl, etcd, controller-gen and helm from the Go module proxy
# (pinned; the first run takes about 10 minutes, kube-apiserver being most of it) and prints
# name=path lines. See scripts/install-k8s-tools.sh and docs/e2e.md.
k8s-tools:
	./scripts/install-k8s-tools.sh

# image builds tollgate's container image without a container engine (internal/tools/mkimage):
# a static binary, CA bundle, nonroot user 65532; writes the OCI layout bin/image/oci and its
# tarball bin/image/tollgate.oci.tar tagged with charts/tollgate's appVersion (VERSION=... to
# override), reproducibly, and prints the digest. IMAGE_PLATFORMS=linux/amd64,linux/arm64 builds
# an index of both; IMAGE_PUSH=host:port/repo[:tag] also pushes it (plain HTTP for localhost, or
# with IMAGE_INSECURE=1; credentials from ~/.docker/config.json).
.PHONY: image
IMAGE_PLATFORMS ?= linux/amd64
image:
	$(GO) run ./internal/tools/mkimage -out bin/image -platforms $(IMAGE_PLATFORMS) $(if $(VERSION),-version $(VERSION)) $(if $(IMAGE_PUSH),-push $(IMAGE_PUSH)) $(if $(IMAGE_INSECURE),-insecure)

# policies builds every example and built-in policy and the test fixtures (skipping those that are
# up to date; scripts/build-policies.sh -f rebuilds all).
policies: tools
	./scripts/build-policies.sh
	./scripts/embed-builtins.sh

# test runs every check and test: the lint checks (gofmt, go vet, go mod tidy -diff on every
# module), the root module (host, CLI, integration suites), every submodule, and the operator's
# end-to-end tests on a real kube-apiserver (make e2e). Every step runs even when an earlier one
# failed; the failures are listed at the end and the target then fails.
# The real-node e2e step spends most of its time waiting on the cluster (pods starting, leases,
# the kubelet's syncs), so by default it runs beside the other steps (TEST_E2E_BESIDE=0: after
# them); its output goes to bin/e2e-test.log and is printed when it ends.
TEST_E2E_BESIDE ?= 1
test: policies
	@$(MAKE) --no-print-directory demo-modules
	@failed=(); \
	step() { local name="$$1" t0=$$SECONDS; shift; printf '\n=== make test: %s\n' "$$name"; \
		if "$$@"; then printf '=== make test: passed %s in %d s\n' "$$name" $$((SECONDS-t0)); \
		else failed+=("$$name"); printf '=== make test: FAILED %s in %d s\n' "$$name" $$((SECONDS-t0)); fi; }; \
	e2epid=; \
	if [ "$(TEST_E2E_BESIDE)" = 1 ]; then \
		mkdir -p bin; e2elog="$(CURDIR)/bin/e2e-test.log"; \
		printf '\n=== make test: make e2e, beside the steps below (log: %s, printed when it ends)\n' "$$e2elog"; \
		( t0=$$SECONDS; $(submake) e2e >"$$e2elog" 2>&1; rc=$$?; echo "$$((SECONDS-t0))" >"$$e2elog.secs"; exit $$rc ) & e2epid=$$!; \
	fi; \
	step lint ./scripts/lint.sh; \
	step "go test ./... (root module)" $(GO) test $(GOTEST_FLAGS) ./...; \
	for m in $(filter-out test/e2e,$(SUBMODULES)); do step "go test ./... in $$m" $(test-module) $$m; done; \
	if [ -n "$$e2epid" ]; then \
		printf '\n=== make test: waiting for make e2e (started beside the steps above)\n'; \
		if wait "$$e2epid"; then e2erc=0; else e2erc=1; fi; cat "$$e2elog"; \
		if [ "$$e2erc" = 0 ]; then printf '=== make test: passed make e2e in %s s (beside the other steps)\n' "$$(cat "$$e2elog.secs")"; \
		else failed+=("make e2e"); printf '=== make test: FAILED make e2e in %s s (beside the other steps)\n' "$$(cat "$$e2elog.secs" 2>/dev/null)"; fi; \
	else step "make e2e" $(submake) e2e; fi; \
	if (( $${#failed[@]} > 0 )); then printf '\nmake test: %d step(s) failed:\n' "$${#failed[@]}"; printf '    %s\n' "$${failed[@]}"; exit 1; fi; \
	echo; echo "make test: every step passed; the steps took $$SECONDS s"

# submake runs make on a target of this Makefile. It names $(MAKE) indirectly on purpose: make
# runs a recipe line that names $(MAKE) even under `make -n`, and test's one line is every suite.
submake = $(MAKE) --no-print-directory

# test-module runs one submodule's tests: $(test-module) DIR.
test-module = bash -c 'cd "$$1" && exec $(GO) test $(GOTEST_FLAGS) ./...' test-module

# test-modules runs the tests of every submodule but test/e2e (make e2e), all of them even when
# one fails.
# test-under-load runs the root module's tests with LOAD_BURNERS (default 2) CPU-bound processes
# beside them (scripts/under-load.sh): a test with a wall-clock ceiling or an instant sample must
# pass on a loaded 2-core machine too (docs/benchmarks/builds.md has the recorded runs).
LOAD_BURNERS ?= 2
.PHONY: test-under-load
test-under-load: policies
	@$(MAKE) --no-print-directory demo-modules
	./scripts/under-load.sh -n $(LOAD_BURNERS) $(GO) test -count=1 $(GOTEST_FLAGS) ./...

test-modules:
	@failed=(); for m in $(filter-out test/e2e,$(SUBMODULES)); do echo "go test ./... in $$m"; $(test-module) $$m || failed+=("$$m"); done; \
	if (( $${#failed[@]} > 0 )); then echo "test-modules: failed in $${failed[*]}"; exit 1; fi

# lint checks gofmt, go vet and go mod tidy -diff in every Go module (scripts/lint.sh).
.PHONY: lint
lint:
	./scripts/lint.sh

# e2e runs the end-to-end tests (test/e2e, docs/e2e.md) on a real one-node cluster: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, containerd, runc, the
# kubelet, a CNI bridge and a registry, inside network/mount/PID namespaces the test makes (root
# needed; the kernel tears them down). The chart is installed with helm; the controller and the
# policy servers run as pods of `make image`'s image. E2E_RUN selects tests.
E2E_RUN ?= .
K8S_TOOLS := kube-apiserver etcd kubectl kubelet kube-controller-manager kube-scheduler kube-proxy helm
# k8s-env exports the tools' paths (KUBE_APISERVER=..., HELM=...) for the recipe line it prefixes.
k8s-env = tools="$$(./scripts/install-k8s-tools.sh $(K8S_TOOLS))"; \
	while IFS='=' read -r name path; do export "$$(tr 'a-z-' 'A-Z_' <<<"$$name")=$$path"; done <<<"$$tools"; \
	export TOLLGATE_BIN="$(CURDIR)/bin/tollgate" TOLLGATE_IMAGE_LAYOUT="$(CURDIR)/bin/image/oci";
e2e: policies build image
	@set -e; $(k8s-env) \
	cd test/e2e && $(GO) test -count=1 -v -timeout 40m -run '$(E2E_RUN)' ./...

# BENCH_MODULES are submodules whose benchmarks make bench runs too (the Gatekeeper mutation
# module against Gatekeeper's own code: docs/benchmarks.md "Gatekeeper mutation module").
BENCH_MODULES := test/gkdiff policies/gatekeeper-mutation
bench: policies
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...
	@set -e; for m in $(BENCH_MODULES); do echo "go test -bench . in $$m"; (cd $$m && $(GO) test -run '^$$' -bench . -benchtime 2s ./...); done
	@$(MAKE) --no-print-directory bench-engines

# bench-map-start measures issue 31's start-up targets (cmd/tollgate BenchmarkServeMAPColdStart, 3
# cold starts): `tollgate serve` with 8 MutatingAdmissionPolicy policies and an empty compilation
# cache, the first MAP patch from exec (target <= 5 s) and VmRSS after one request to each policy
# (target <= 150 MiB), each start printed with met/MISSED and the load average. `make bench` runs
# it once among the others. Numbers go to docs/benchmarks/fifty-policies.md by hand.
.PHONY: bench-map-start
bench-map-start: policies
	$(GO) test -run '^$$' -bench '^BenchmarkServeMAPColdStart$$' -benchtime 3x -v ./cmd/tollgate

# bench-engines runs the same modules on the same 5 KB Pod on plain wazero, tollgate (the guest call
# and the whole evaluation), wasmtime with an instance reused and wasmtime with a fresh instance per
# request (test/enginecmp, a module of its own: wasmtime-go needs cgo), then prints the p50s measured
# in interleaved rounds and their ratios. ENGINECMP_BIG=1 adds the 66 MB MutatingAdmissionPolicy
# module (its first compile under wasmtime and plain wazero takes minutes; compiled code is kept in
# $$XDG_CACHE_HOME/tollgate/enginecmp, or ENGINECMP_CACHE).
bench-engines: policies
	cd test/enginecmp && $(GO) test -run '^$$' -bench . -benchtime 2s . && $(GO) run ./cmd/enginecmp

# bench-server measures `tollgate serve` against a native Go ceiling on loopback (about 5 minutes;
# run it on an otherwise idle machine). Numbers go to docs/benchmarks.md by hand.
BENCH_DURATION ?= 20s
bench-server: policies build
	$(GO) build -o bin/loadgen ./test/loadgen
	bin/loadgen suite -tollgate bin/tollgate -duration $(BENCH_DURATION)
	bin/loadgen fairness -tollgate bin/tollgate -duration $(BENCH_DURATION)
	bin/loadgen shadow -tollgate bin/tollgate -duration $(BENCH_DURATION)

# bench-shadow is bench-server's shadow part alone: the same policy with and without a shadow
# (policies.yml shadow:), side by side, in alternating rounds (docs/benchmarks/server.md).
bench-shadow: build
	$(GO) build -o bin/loadgen ./test/loadgen
	bin/loadgen shadow -tollgate bin/tollgate -duration $(BENCH_DURATION)

# bench-rounds drives one `tollgate serve` (the mutating example on the realistic 5 KB Pod of
# test/testdata/reviews) with ROUNDS closed-loop rounds of ROUND each and prints req/s, the
# server's CPU per request and RSS per round: does throughput decay while the server runs?
ROUNDS ?= 10
ROUND ?= 10s
bench-rounds: policies build
	$(GO) build -o bin/loadgen ./test/loadgen
	bin/loadgen rounds -tollgate bin/tollgate -rounds $(ROUNDS) -round $(ROUND)

# bench-operator measures the operator at scale (test/e2e BenchmarkOperatorScale, docs/benchmarks.md
# "Operator"): 200 policies on 5 PolicyServers on a real apiserver, the time to all active, the
# controller's RSS, and what a controller restart writes (target: nothing). About 3 minutes.
bench-operator: policies build image
	@set -e; $(k8s-env) \
	cd test/e2e && $(GO) test -count=1 -v -timeout 30m -run '^$$' -bench OperatorScale -benchtime 1x .

# bench-capabilities measures a context-aware policy that lists 1,000 Ingresses per evaluation
# (test/e2e BenchmarkContextAwareList1000, docs/benchmarks.md "Host capabilities"): `tollgate serve`
# on a real apiserver, p50/p99 and the server's RSS with the Ingress cache and with a cache cap
# below the kind's size. About 3 minutes.
bench-capabilities: policies build image
	@set -e; $(k8s-env) \
	cd test/e2e && $(GO) test -count=1 -v -timeout 30m -run '^$$' -bench ContextAwareList1000 -benchtime 1x .

# bench-audit measures `tollgate audit` (test/e2e BenchmarkAudit10k, docs/benchmarks.md "Audit"): 10,000
# Pods in 100 namespaces, 5 policies on a PolicyServer of 2 replicas, a full audit writing one Report
# per Pod (target <= 60 s, RSS <= 100 MB), then a run over the unchanged cluster. About 4 minutes.
.PHONY: bench-audit
bench-audit: policies build image
	@set -e; $(k8s-env) \
	cd test/e2e && $(GO) test -count=1 -v -timeout 30m -run '^$$' -bench Audit10k -benchtime 1x .

# check is the old name of lint.
check: lint

# clean removes what the build wrote into the repository; the build cache (and the tools) outside
# it stay: the next build takes the policies from there.
clean:
	rm -rf bin
	find examples policies test/testdata/policies -name 'policy*.wasm' 2>/dev/null | xargs -r rm -f
	rm -f host/builtin/modules/*.wasm host/builtin/zz_embedded.go

# clean-cache removes the build cache of scripts/build-policies.sh (every clone's policy outputs;
# the next build compiles them all again). The tools (TOOLS_DIR) stay.
BUILD_CACHE ?= $(or $(TOLLGATE_BUILD_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tollgate/builds)
.PHONY: clean-cache
clean-cache:
	rm -rf "$(BUILD_CACHE)"

# crds regenerates the CRD manifests in crds/ and the deep-copy functions from the Go types in
# crds/api/v1 with the pinned controller-gen (built from the Go module proxy, cached outside the
# repository), and copies them into charts/tollgate/crds; crds/generate_test.go and
# test/helmchart fail when the committed files are out of date.
crds:
	@cg="$$(./scripts/install-k8s-tools.sh controller-gen | sed -n 's/^controller-gen=//p')"; \
	"$$cg" object paths=./crds/api/... && "$$cg" crd paths=./crds/api/... output:crd:artifacts:config=crds && \
	rm -f charts/tollgate/crds/*.yaml && cp crds/*.yaml charts/tollgate/crds/

# map-tinygo checks the build-time dependency patches of scripts/tinygo-patches (issue 31): it
# builds the TinyGo probes of policies/mutating-admission-policy/internal/tinygoprobe against the
# patched modules and runs them on wazero; each must print ok with every patch and fail as
# scripts/tinygo-patches/README.md says without the patch it needs. CPU-heavy: several TinyGo
# builds of cel-go, one at a time (minutes each).
map-tinygo: tools
	./scripts/build-map-tinygo.sh --check

# map-tinygo-engine builds the MAP module on package jsonengine with TinyGo (issue 31) into
# policies/mutating-admission-policy/tinygo/policy.wasm, outside the build cache (about 4 minutes of
# one core on a quiet machine), and runs test/mapdiff on it. `make policies` builds the same module
# (cached) as builtin://mutating-admission-policy; MAP_BUILD=go builds the standard-Go module instead,
# kept only as a reference for tests and benchmarks (docs/mutating-admission-policy.md, "Building").
map-tinygo-engine: tools
	./scripts/build-map-tinygo.sh -o policies/mutating-admission-policy/tinygo/policy.wasm \
		policies/mutating-admission-policy/tinygo -- -target=./wasip1-map.json -buildmode=c-shared -scheduler=none -no-debug
	TOLLGATE_MAP_MODULE=$(CURDIR)/policies/mutating-admission-policy/tinygo/policy.wasm \
		go test ./test/mapdiff -run 'TestDifferential|TestParserLimits' -count=1 -timeout 60m
