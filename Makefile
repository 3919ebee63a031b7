# The two commands of the README: `make run` and `make test`. Both install
# what is missing (Go, the PostgreSQL server binaries; for the tests also
# nats-server, Patroni and etcd) first.
GO := $(shell scripts/ensure-go.sh)
# coffer is one static binary (the container image ships it so): build and
# test it without cgo, so that the tests build what is shipped, once.
export CGO_ENABLED := 0
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test fuzz fuzz-api build deps lint generate clean

run: build
	./bin/coffer dev

build: deps
	$(GO) build -o bin/coffer ./cmd/coffer

deps:
	@scripts/ensure-postgres.sh

lint:
	@out=$$("$$(dirname "$$(command -v $(GO))")/gofmt" -l $$(git ls-files --cached --others --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# The dev test runs the curl example that `coffer dev` prints, the console
# test drives Debian's chromium headless (docs/console.md); the deploy
# test checks the alerting rules and the dashboard's queries with promtool
# (PROMTOOL: scripts/ensure-promtool.sh); the fault
# suite's Patroni run needs Patroni and etcd (installed when root, else
# skipped, and said so); TestSchemathesis needs Schemathesis (installed
# from PyPI into .cache/schemathesis); the tests of `coffer bench --pg-cpus`
# need root and cgroup v1 (else skipped, and said so). Then every fuzz
# target runs briefly.
test: deps lint
	@command -v curl >/dev/null 2>&1 || scripts/apt-install.sh curl
	@scripts/ensure-nats.sh
	@command -v chromium >/dev/null 2>&1 || scripts/apt-install.sh chromium
	@scripts/ensure-patroni.sh
	@scripts/ensure-schemathesis.sh >/dev/null
	promtool=$$(scripts/ensure-promtool.sh) && PROMTOOL="$$promtool" $(GO) test -count=1 -timeout 60m ./...
	@command -v patroni >/dev/null 2>&1 || echo "make test: TestTorturePatroni was skipped: Patroni is not installed (apt-get install -y patroni etcd-server)"
	@[ "$$(id -u)" = 0 ] && [ -e /sys/fs/cgroup/cpuset/cgroup.procs ] && [ -e /sys/fs/cgroup/cpu/cgroup.procs ] || echo "make test: TestSetConfines, TestRemoveNamesAProcessLeft and TestBenchSelfConfined were skipped: confining to CPUs needs root and the cgroup v1 cpuset and cpu hierarchies"
	@$(MAKE) --no-print-directory fuzz

# Runs every fuzz target for FUZZTIME: a count of inputs by default, a
# few seconds' worth; `make fuzz FUZZTIME=10m` for a longer search
# (docs/testing.md). A time ends on a race in Go's fuzzing coordinator
# (go.dev/issue/75804, fixed in Go 1.27) that can fail a target with
# "context deadline exceeded" on a loaded machine, no input found; a
# count has no deadline. A failing input is written under the package's
# testdata/fuzz.
FUZZTIME ?= 20000x
fuzz:
	@for file in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
	  for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    echo "fuzz $$target in $$(dirname $$file) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s $$(dirname $$file) || exit 1; \
	  done; \
	done

# Runs Schemathesis alone against `coffer dev` (TestSchemathesis,
# docs/testing.md): positive, negative and stateful tests of every
# operation of /openapi.json.
fuzz-api: deps
	@scripts/ensure-schemathesis.sh >/dev/null
	$(GO) test -count=1 -timeout 20m -run '^TestSchemathesis$$' -v ./cmd/coffer

# Regenerates the Go code and the OpenAPI document from api/coffer/v1/wallet.proto.
generate:
	$(GO) generate ./api

clean:
	rm -rf bin .coffer
