# llmesh — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export PATH := $(BIN):$(PATH)

PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GOLANGCI_LINT_VERSION := v2.15.0

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the llmesh binary into bin/, with NVML GPU telemetry (-tags nvml: needs a C compiler).
	$(GO) build -tags nvml -o $(BIN)/llmesh ./cmd/llmesh

.PHONY: filter
filter: ## Build the Envoy golang filter llmesh-filter.so (c-shared, needs cgo and glibc >= 2.34).
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o llmesh-filter.so ./cmd/llmesh-filter

.PHONY: test
TESTLOG := $(BIN)/test.log

test: e2e-deps ## Run the whole test suite: vet, unit and race tests, fuzz seeds, e2e, doc commands. CI runs this.
	$(GO) vet ./...
	$(GO) vet -tags nvml ./bench/gpu/
	@mkdir -p $(BIN); echo "go test -race ./... (full output: $(TESTLOG); skipped tests print SKIP with their reason)"
	@set -o pipefail; $(GO) test -race -count=1 -timeout 20m -v ./... 2>&1 | tee $(TESTLOG) | \
		awk '/^(ok|FAIL|panic:)/ || /^--- FAIL/ {print; next} /^ +[a-z_0-9]+\.go:[0-9]+: / {why=$$0; sub(/^ +[a-z_0-9]+\.go:[0-9]+: (SKIP:? )?/, "", why)} /^ *--- SKIP/ {name=$$3; print "SKIP " name ": " why}' \
		|| { echo "tests failed; the failures are in $(TESTLOG) (grep -n -- '--- FAIL' $(TESTLOG))"; exit 1; }
	$(MAKE) filter-check
	$(MAKE) filter-host

.PHONY: filter-check
filter-check: filter ## Build the .so and check it exports the golang filter's ten entry points (what Envoy's dso.cc looks up).
	@want="envoyGoFilterNewHttpPluginConfig envoyGoFilterMergeHttpPluginConfig envoyGoFilterDestroyHttpPluginConfig envoyGoFilterOnHttpHeader envoyGoFilterOnHttpData envoyGoFilterOnHttpLog envoyGoFilterOnHttpStreamComplete envoyGoFilterOnHttpDestroy envoyGoRequestSemaDec envoyGoFilterCleanUp"; \
	n=0; missing=""; for s in $$want; do \
		if nm -D --defined-only llmesh-filter.so | grep -q " T $$s\$$"; then n=$$((n+1)); else missing="$$missing $$s"; fi; done; \
	if [ -n "$$missing" ]; then echo "llmesh-filter.so lacks entry points:$$missing"; exit 1; fi; \
	echo "llmesh-filter.so: $$n of 10 entry points exported, $$(nm -D --undefined-only llmesh-filter.so | grep -c ' U envoyGo') host functions imported"

ENVOY_API = $(shell $(GO) list -m -f '{{.Dir}}' github.com/envoyproxy/envoy)/contrib/golang/common/go/api
CXX ?= g++

$(BIN)/envoyhost: $(wildcard testkit/envoyhost/host/*)
	@mkdir -p $(BIN)
	$(CXX) -std=c++17 -O1 -g -Wall -pthread -rdynamic -I$(ENVOY_API) -o $@ $(filter %.cc,$^) -ldl

.PHONY: envoyhost
envoyhost: $(BIN)/envoyhost ## Build the Envoy test host (bin/envoyhost) that runs llmesh-filter.so through the real SDK.

# filter-host lets the test build the host (cached by its sources under the
# user cache directory, so go test ./... and this target compile it once).
.PHONY: filter-host
filter-host: filter ## Run every Envoy host scenario (testkit/envoyhost) against llmesh-filter.so, one line each.
	@out=$$(mktemp); rc=0; \
	LLMESH_FILTER_SO=$(CURDIR)/llmesh-filter.so \
		$(GO) test -count=1 -v -run '^TestScenarios$$' ./testkit/envoyhost/ > $$out 2>&1 || rc=$$?; \
	sed -n -E 's%^    --- (PASS|FAIL|SKIP): TestScenarios/([^ ]*) (.*)%\1 \2 \3%p' $$out; \
	echo "filter-host: $$(grep -c '^    --- PASS' $$out) of $$(grep -c '^    --- ' $$out) scenarios pass"; \
	if [ $$rc -ne 0 ] || grep -q '^--- SKIP' $$out; then cat $$out; fi; rm -f $$out; exit $$rc

.PHONY: host-conformance
host-conformance: ## Run the cross-host conformance table through the gateway, the fake SDK and the real filter .so under the Envoy host.
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(BIN)/llmesh-filter-conformance.so ./testkit/conformance/recso
	LLMESH_CONFORMANCE_SO=$(BIN)/llmesh-filter-conformance.so \
		$(GO) test -count=1 -v -run '^TestHostConformance' ./testkit/conformance/

.PHONY: test-e2e
test-e2e: e2e-deps ## Run only the end-to-end tests (real processes on loopback).
	$(GO) test -count=1 -timeout 15m -v ./e2e/...

.PHONY: e2e-deps
e2e-deps: ## Install what the e2e tests need when missing, saying so (Debian's prometheus, which ships promtool, and chromium).
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
		echo "installing Debian package prometheus for the e2e tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) >/dev/null 2>&1 \
		|| echo "could not install prometheus: the Prometheus e2e test will be skipped"; }
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian package chromium for the report.html browser test (e2e/report)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
		|| echo "could not install chromium: the browser test will be skipped (SKIP line)"; }

.PHONY: bench
bench: ## Run the Go benchmarks (observer, adapter, relocation, gateway, sim).
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: soak
soak: build ## 1,000 concurrent streams through gateway -> sim for 60 s; checks nothing is lost or leaked.
	LLMESH_SOAK=1 $(GO) test -count=1 -timeout 10m -v -run TestSoak ./e2e/...

.PHONY: lint
lint: $(BIN)/golangci-lint ## Static checks: go vet, staticcheck, errcheck and more (golangci-lint, pinned).
	$(BIN)/golangci-lint run ./...

$(BIN)/golangci-lint:
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: check
check: ## Fail when go mod tidy or gofmt would change the tree.
	$(GO) mod tidy
	gofmt -l -w $$(git ls-files '*.go')
	git diff --exit-code

.PHONY: results
results: build ## Record the runs behind the README's headline table (virtual-time policy comparison + the full demo).
	mkdir -p results
	$(BIN)/llmesh bench simulate --loads 0.05,0.7,0.9,1.0,1.2 --duration 1800s --json results/simulate.json
	$(BIN)/llmesh demo --out results/demo

.PHONY: headline
headline: results ## Record the runs and render the README's headline table from them.
	$(GO) run ./scripts/headline --simulate results/simulate.json --ab results/demo/ab.json --readme README.md

.PHONY: demo
demo: ## Run the one-command demo (sim + gateway, fifo vs preemptive A/B, SLO report).
	$(GO) run ./cmd/llmesh demo

.PHONY: proto
proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## Regenerate the gRPC/protobuf code in api/.
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	protoc -I api/proto \
		--go_out=. --go_opt=module=github.com/llmesh/llmesh \
		--go-grpc_out=. --go-grpc_opt=module=github.com/llmesh/llmesh \
		api/proto/llm/v1/generation.proto api/proto/vllm/grpc/engine/engine.proto \
		api/proto/llmesh/scheduler/v1/scheduler.proto

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
