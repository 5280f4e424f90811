# airlock
#
#   make hello   build airlock and run one command in a sandbox
#   make test    run every test this host can run; name the skipped ones
#   make check   formatting, vet, a macOS build, go.mod tidiness
#
# Both hello and test install what they need (Debian packages, as root).
GO    ?= go
AGENT := internal/agentbin/bin/airlock-agent
# What the tests and the sandboxes use from the host.
DEBS  := python3 procps iproute2 util-linux bubblewrap runsc

.PHONY: all build agent deps hello test check clean

all: build

# The agent is a small static binary embedded in airlock (docs/decisions.md).
agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(AGENT) ./cmd/airlock-agent
	sha256sum $(AGENT) | cut -d' ' -f1 > $(AGENT).sha256

build: agent
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/airlock ./cmd/airlock

# deps installs the Debian packages above that are missing (needs root).
deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing: $$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing Debian packages (install them as root): $$missing"; \
		fi; \
	fi

hello: deps build
	./bin/airlock run -- python3 -c 'print("hello from the sandbox")'

# Packages run one at a time (-p 1): the resource-limit tests measure
# timeouts and CPU on 2 cores and must not compete with each other.
test: deps build
	@scripts/test.sh

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	$(GO) mod tidy -diff

clean:
	rm -rf bin $(AGENT) $(AGENT).sha256
