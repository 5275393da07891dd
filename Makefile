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
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the llmesh binary into bin/.
	$(GO) build -o $(BIN)/llmesh ./cmd/llmesh

.PHONY: test
test: ## Run the whole test suite (unit, race, e2e where possible). This is what CI runs.
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

.PHONY: filter
filter: ## Build the Envoy golang filter llmesh-filter.so (c-shared, needs cgo and glibc >= 2.34).
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o llmesh-filter.so ./cmd/llmesh-filter

.PHONY: demo
demo: ## Run the one-command demo.
	$(GO) run ./cmd/llmesh demo

.PHONY: proto
proto: $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## Regenerate the gRPC/protobuf code in api/.
	@command -v protoc >/dev/null || { echo "installing protobuf-compiler"; apt-get update -qq && apt-get install -y -qq protobuf-compiler; }
	protoc -I api/proto \
		--go_out=. --go_opt=module=github.com/llmesh/llmesh \
		--go-grpc_out=. --go-grpc_opt=module=github.com/llmesh/llmesh \
		api/proto/llm/v1/generation.proto api/proto/vllm/grpc/engine/engine.proto

$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
