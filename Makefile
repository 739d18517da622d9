# tollgate — see README.md. Every target is idempotent; tools are cached outside the repository
# (shared by every clone on the machine), keyed by version: see scripts/install-tools.sh.
SHELL := /bin/bash
GO ?= go
TOOLS_DIR ?= $(or $(TOLLGATE_TOOLS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tollgate/tools)
TINYGO_VERSION ?= 0.41.1
TINYGO ?= $(TOOLS_DIR)/tinygo-$(TINYGO_VERSION)/bin/tinygo
TOLLGATE_TOOLS_DIR := $(TOOLS_DIR)
export TINYGO TINYGO_VERSION TOLLGATE_TOOLS_DIR

.PHONY: all build policies test bench check tools clean

all: build

build:
	$(GO) build -o bin/tollgate ./cmd/tollgate

# tools installs what building the policies and running the tests needs (apt packages, TinyGo).
tools:
	./scripts/install-tools.sh

# policies builds every example and built-in policy and the test fixtures.
policies: tools
	./scripts/build-policies.sh

test: policies
	$(GO) test ./... 

bench: policies
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

check:
	gofmt -l . | (! grep .) || (echo "gofmt needed"; exit 1)
	$(GO) vet ./...
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

clean:
	rm -rf bin
