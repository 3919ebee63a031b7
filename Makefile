# The two commands of the README: `make run` and `make test`. Both install
# what is missing (Go, the PostgreSQL server binaries) first.
GO := $(shell scripts/ensure-go.sh)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test build deps lint clean

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

test: deps lint
	$(GO) test -count=1 -timeout 20m ./...

clean:
	rm -rf bin .coffer
