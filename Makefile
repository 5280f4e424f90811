# airlock: `make` builds bin/airlock with its agent embedded; `make test`
# runs every test this host can run.
GO ?= go
AGENT := internal/agentbin/bin/airlock-agent

.PHONY: all build agent test check fmt vet clean

all: build

agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(AGENT) ./cmd/airlock-agent
	sha256sum $(AGENT) | cut -d' ' -f1 > $(AGENT).sha256

build: agent
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/airlock ./cmd/airlock

clean:
	rm -rf bin $(AGENT) $(AGENT).sha256
