# dsec: build, test, benchmark. Most targets need root (sandboxes, images).
#
#   make setup   install packages and build the default images (scripts/setup.sh)
#   make build   C init (internal/initbin/dsec-init), FnCall zygote (internal/fncall/dsec-fncall) + bin/dsec
#   make test    setup + build, then go vet, the race-enabled test suite, the Python
#                SDK tests and the E2B acceptance suite (test/e2b)
#   make test-unprivileged   the mock-driver suites as nobody (no root, no images)
#   make demo    setup + build, then bin/dsec demo
#   make bench   build, then the create benchmark (BENCH_COMPARE=crun,runc peers)
#   make fuzz    every Fuzz* target for FUZZTIME (default 15s) each, then the C
#                parsers' libFuzzer harnesses for CFUZZTIME seconds (default 10) each
#   make clean

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -ec

# Go may not be on PATH (e.g. CI as root on a fresh machine).
export PATH := /usr/local/go/bin:$(PATH)

GO        ?= go
# Debian's python3 (with python3-pytest), not whatever python3 comes first on PATH.
PYTHON    ?= /usr/bin/python3
FUZZTIME  ?= 15s
CFUZZTIME ?= 10
# Test packages run 2 at a time: tests that create sandboxes contend for the
# same 2 cores, cgroups and images.
TESTFLAGS ?= -race -count=1 -p 2 -timeout 30m
BENCH_N        ?= 500
BENCH_PARALLEL ?= 4
BENCH_COMPARE  ?= crun,runc

.PHONY: all setup build init test demo bench fuzz clean

all: build

setup:
	sh scripts/setup.sh

init:
	sh internal/initbin/build.sh
	sh internal/fncall/build.sh
	sh internal/vm/agentbin/build.sh

build: init
	$(GO) build -o bin/dsec ./cmd/dsec

# Every test run is strict: scripts/testreport fails on a skip that is not on
# .ci/skips.allow (pytest: .ci/pyskips.allow), and the e2e and Python tests drive
# a race-enabled server binary.
test: setup build
	$(GO) vet ./...
	DSEC_E2E_RACE=1 $(GO) test $(TESTFLAGS) -json ./... | $(GO) run ./scripts/testreport -allow .ci/skips.allow
	$(MAKE) test-unprivileged
	$(MAKE) test-e2b
	$(MAKE) test-python

# The E2B acceptance suite: the pinned, unmodified e2b npm package against a real
# `dsec server` (bin/dsec), as root; needs node >= 20.18 and npm (npm ci on first run).
.PHONY: test-e2b
test-e2b: build
	sh test/e2b/run.sh

# The mock-driver suites (driver conformance on the mock, the agent's Mock tests)
# as an ordinary user: they must need neither root nor images. As root this runs
# the test binaries as nobody; as any other user it runs them as that user.
.PHONY: test-unprivileged
test-unprivileged: init
	d=$$(mktemp -d) && chmod 755 $$d && mkdir -m 1777 $$d/tmp && \
	$(GO) test -c -race -o $$d/agent.test ./internal/agent && \
	$(GO) test -c -race -o $$d/mock.test ./internal/driver/mock && \
	as="$(if $(filter 0,$(shell id -u)),setpriv --reuid=65534 --regid=65534 --clear-groups)" && \
	(cd $$d/tmp && export TMPDIR=$$d/tmp && \
	 $$as $$d/agent.test -test.run Mock -test.count=1 && $$as $$d/mock.test -test.count=1); \
	rc=$$?; rm -rf $$d; exit $$rc

# The Python SDK's tests against a real `dsec server` (a -race build), as root.
.PHONY: test-python
test-python: build
	$(GO) build -race -o bin/dsec-race ./cmd/dsec
	cd sdk/python && DSEC_BIN=$(CURDIR)/bin/dsec-race $(PYTHON) -m pytest -q -rs --junitxml=$(CURDIR)/bin/pytest.xml tests
	$(PYTHON) scripts/pyskipcheck.py bin/pytest.xml .ci/pyskips.allow

demo: setup build
	bin/dsec demo

bench: setup build
	bin/dsec bench create --n $(BENCH_N) --parallel $(BENCH_PARALLEL) --compare $(BENCH_COMPARE) --json
	bin/dsec bench exec --n 1000 --json
	bin/dsec bench density --n 3200 --json
	sh test/e2b/run.sh bench

# Go targets (scripts/fuzz.sh), then the C init's and zygote's packet parsers
# under clang -fsanitize=fuzzer,address,undefined (scripts/cfuzz.sh). make test
# runs it bounded: 1 s per Go target, 5 s per C harness (134 s measured here at load 4-7).
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) sh scripts/fuzz.sh
	CFUZZTIME=$(CFUZZTIME) sh scripts/cfuzz.sh

clean:
	rm -rf bin internal/initbin/dsec-init internal/fncall/dsec-fncall

# Generated Go code for the E2B envd protos (committed). Needs protoc (apt
# protobuf-compiler); the two generators are installed at pinned versions into .tools/.
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_CONNECT_VERSION ?= v1.21.1
E2B_PROTO_DIR              := internal/frontend/e2b/envdpb

.PHONY: proto
proto:
	GOBIN=$(CURDIR)/.tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/.tools $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_VERSION)
	cd $(E2B_PROTO_DIR) && PATH=$(CURDIR)/.tools:$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		process/process.proto filesystem/filesystem.proto
