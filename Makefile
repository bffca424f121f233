# dsec: build, test, benchmark. Most targets need root (sandboxes, images).
#
#   make setup   install packages and build the default images (scripts/setup.sh)
#   make build   C init (internal/backend/initbin/dsec-init), FnCall zygote (internal/backend/fncall/dsec-fncall),
#                bin/dsec (the client) + bin/dsecd (server, cluster roles, image, bench, demo;
#                `dsec server` runs the dsecd next to it)
#   make test    setup + build, then go vet, the race-enabled test suite, the Python
#                SDK tests, the E2B acceptance suite (test/e2b) and the dashboard's
#                browser tests (test/ui)
#   make ui      rebuild the dashboard's front end (ui/ -> ui/dist, committed; npm ci on first run)
#   make test-ui the dashboard in headless chromium against a real server (screenshots: bin/ui-artifacts/)
#   make test-unprivileged   the mock-driver suites as nobody (no root, no images)
#   make demo    setup-demo (packages + the debian image only) and build, then bin/dsec demo
#   make bench   build, then the create benchmark (BENCH_COMPARE=crun,runc peers)
#   make soak    the long chaos soak: SOAK_SANDBOXES (1000) sandboxes x an exec
#                loop for SOAK_SECONDS (600) against a real server (test/e2e TestChaosSoak)
#   make fuzz    every Fuzz* target for FUZZTIME (default 15s; Nx = N executions) each,
#                then the C parsers' libFuzzer harnesses for CFUZZTIME seconds (default 10)
#   make fuzz-ci the bounded form make test runs (300x per Go target, 5 s per C harness)
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

.PHONY: all setup build init test demo bench soak fuzz fuzz-ci clean

all: build

setup:
	sh scripts/setup.sh

init:
	sh internal/backend/initbin/build.sh
	sh internal/backend/fncall/build.sh
	sh internal/backend/vm/agentbin/build.sh

# The commit every `dsec bench --json` reports (bench is dsecd's), also where VCS
# stamping is off (GOFLAGS=-buildvcs=false); "-dirty" when the tree has changes.
DSEC_COMMIT ?= $(shell r=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$r || echo $$r-dirty; })
# The client is built without cgo: a static binary starts without the dynamic
# loader (about 1 ms of every `dsec` command on the reference VM, most of it
# glibc's CPU cache probing).
build: init
	CGO_ENABLED=0 $(GO) build -o bin/dsec ./cmd/dsec
	$(GO) build -ldflags "-X github.com/dsec-dev/dsec/internal/bench.ldCommit=$(DSEC_COMMIT)" -o bin/dsecd ./cmd/dsecd

# Every test run is strict: scripts/testreport fails on a skip that is not on
# .ci/skips.allow (pytest: .ci/pyskips.allow), and the e2e and Python tests drive
# a race-enabled server binary.
test: setup build
	$(GO) vet ./...
	DSEC_E2E_RACE=1 $(GO) test $(TESTFLAGS) -json ./... | $(GO) run ./scripts/testreport -allow .ci/skips.allow
	$(MAKE) test-unprivileged
	$(MAKE) test-cgv2
	$(MAKE) fuzz-ci
	$(MAKE) test-e2b
	$(MAKE) test-ui
	$(MAKE) test-python

# The race-enabled binaries the E2B and Python suites drive (their scripts fail on a
# race report or a server exit they did not cause): bin/dsec-race runs
# bin/dsecd-race for `server` and `image`.
.PHONY: race
race: build
	$(GO) build -race -o bin/dsec-race ./cmd/dsec
	$(GO) build -race -ldflags "-X github.com/dsec-dev/dsec/internal/bench.ldCommit=$(DSEC_COMMIT)" -o bin/dsecd-race ./cmd/dsecd

# The E2B acceptance suite: the pinned, unmodified e2b npm package against a real
# race-enabled `dsec server` (bin/dsec-race, running bin/dsecd-race), as root; needs node >= 20.18 and npm
# (npm ci on first run).
.PHONY: test-e2b
test-e2b: race
	DSEC=$(CURDIR)/bin/dsec-race sh test/e2b/run.sh

# The dashboard's front end: vite + TypeScript in ui/, built into ui/dist, which
# is committed and embedded in bin/dsecd (a machine without Node serves it).
.PHONY: ui
ui:
	cd ui && { [ -d node_modules/vite ] || npm ci --no-audit --no-fund; } && npm run build

# The dashboard end to end: headless Debian chromium driven by playwright-core
# against a real `dsec server` (root) and a mock-driver node with 10,000
# sandboxes (first paint); screenshots in bin/ui-artifacts/.
.PHONY: test-ui
test-ui: build
	GO=$(GO) sh test/ui/run.sh

# The mock-driver suites (driver conformance on the mock, the agent's Mock tests)
# as an ordinary user: they must need neither root nor images. As root this runs
# the test binaries as nobody; as any other user it runs them as that user.
.PHONY: test-unprivileged
test-unprivileged: init
	d=$$(mktemp -d) && chmod 755 $$d && mkdir -m 1777 $$d/tmp && \
	$(GO) test -c -race -o $$d/agent.test ./internal/agent && \
	$(GO) test -c -race -o $$d/mock.test ./internal/backend/driver/mock && \
	as="$(if $(filter 0,$(shell id -u)),setpriv --reuid=65534 --regid=65534 --clear-groups)" && \
	(cd $$d/tmp && export TMPDIR=$$d/tmp && \
	 $$as $$d/agent.test -test.run Mock -test.count=1 && $$as $$d/mock.test -test.count=1); \
	rc=$$?; rm -rf $$d; exit $$rc

# The cgroup v2 proof: Debian bookworm's 6.1 kernel (the microVMs' guest kernel)
# booted under QEMU TCG with only the cgroup v2 hierarchy (cgroup_no_v1=all), and
# in it, as root, the container conformance suite (busybox, with and without user
# namespaces), the escape probes and the network-policy tests (scripts/cgv2-guest.sh;
# docs/testing.md names the subset). Fails on a failing test or an unlisted skip.
.PHONY: test-cgv2
test-cgv2: init
	GO=$(GO) sh scripts/cgv2-guest.sh

# The Python SDK's tests against a real `dsec server` (a -race build), as root.
.PHONY: test-python
test-python: race
	cd sdk/python && DSEC_BIN=$(CURDIR)/bin/dsec-race $(PYTHON) -m pytest -q -rs --junitxml=$(CURDIR)/bin/pytest.xml tests
	$(PYTHON) scripts/pyskipcheck.py bin/pytest.xml .ci/pyskips.allow

# The demo needs only the debian image and the container backend: setup-demo
# skips the VM kernel, the judge and desktop images and the browser packages.
# make demo builds dsec while the image builds (debootstrap waits mostly on
# the mirror and the disk, the Go build on the CPU).
.PHONY: setup-demo
setup-demo:
	sh scripts/setup.sh demo

demo:
	sh scripts/setup.sh demo-packages
	sh scripts/setup.sh demo & setup=$$!; $(MAKE) build; built=$$?; wait $$setup && [ $$built -eq 0 ]
	bin/dsec demo

bench: setup build
	bin/dsec bench create --n $(BENCH_N) --parallel $(BENCH_PARALLEL) --compare $(BENCH_COMPARE) --json
	bin/dsec bench exec --n 1000 --json
	bin/dsec bench density --n 3200 --json
	sh test/e2b/run.sh bench

# The soak's long form (its 100-sandbox, 60 s form runs in make test).
SOAK_SANDBOXES ?= 1000
SOAK_SECONDS   ?= 600
soak: build
	DSEC_SOAK_SANDBOXES=$(SOAK_SANDBOXES) DSEC_SOAK_SECONDS=$(SOAK_SECONDS) \
		$(GO) test -count=1 -timeout 60m -run 'TestChaosSoak$$' -v ./test/e2e

# Go targets (scripts/fuzz.sh), then the C parsers (the init's and zygote's packets, the shared EXEC parser)
# under clang -fsanitize=fuzzer,address,undefined (scripts/cfuzz.sh). make test
# runs it bounded (fuzz-ci): 300 executions per Go target and 5 s per C harness.
# The Go budget is a count, not a duration: with a duration, go1.26's fuzz
# coordinator can fail a clean run with "context deadline exceeded" when its
# deadline races the workers' shutdown (golang/go#75804, fixed in go1.27).
fuzz:
	FUZZTIME=$(FUZZTIME) GO=$(GO) sh scripts/fuzz.sh
	CFUZZTIME=$(CFUZZTIME) sh scripts/cfuzz.sh

fuzz-ci:
	$(MAKE) fuzz FUZZTIME=300x CFUZZTIME=5

clean:
	rm -rf bin internal/backend/initbin/dsec-init internal/backend/fncall/dsec-fncall

# E2B's REST types (internal/frontend/e2b/e2bapi), generated from E2B's own
# OpenAPI document at a pinned commit; the generated file is committed.
E2B_SPEC_COMMIT      ?= b8029973aa7da5f741f7bb1a9f833b38a0885438
OAPI_CODEGEN_VERSION ?= v2.8.2
.PHONY: e2bapi
e2bapi:
	mkdir -p bin && curl -fsSL -o bin/e2b-openapi.yml https://raw.githubusercontent.com/e2b-dev/E2B/$(E2B_SPEC_COMMIT)/spec/openapi.yml
	cd internal/frontend/e2b/e2bapi && $(GO) run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_VERSION) \
		-config oapi-codegen.yaml $(CURDIR)/bin/e2b-openapi.yml && \
		sed -i -e '/^\/\/ Package e2bapi provides/,+1d' \
			-e '1i // Source: github.com/e2b-dev/E2B spec/openapi.yml at $(E2B_SPEC_COMMIT).' types.gen.go

# Generated Go code for the E2B envd and node RPC protos (committed). Needs protoc (apt
# protobuf-compiler); the two generators are installed at pinned versions into .tools/.
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_CONNECT_VERSION ?= v1.21.1
E2B_PROTO_DIR              := internal/frontend/e2b/envdpb
NODERPC_PROTO_DIR          := internal/cluster/noderpc/noderpcpb

.PHONY: proto
proto:
	GOBIN=$(CURDIR)/.tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/.tools $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_VERSION)
	cd $(E2B_PROTO_DIR) && PATH=$(CURDIR)/.tools:$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		process/process.proto filesystem/filesystem.proto
	cd $(NODERPC_PROTO_DIR) && PATH=$(CURDIR)/.tools:$$PATH protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative \
		noderpc.proto
