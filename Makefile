# ejcloud — see README.md. `make run` starts a local system, `make test` runs every test.
GO      ?= go
BIN     := bin
ZK_JAR  := /usr/share/java/zookeeper.jar
SUDO    := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)
BINARIES := ./scheduler/cmd/ejcloud-scheduler ./integration/mesoslocal/cmd/mesos-local ./scheduler/binpack/cmd/binpack-bench
# The executors are linked statically (no cgo): agents fetch them onto hosts whose C library
# may differ, and every shard re-executes the executor as its script's supervisor, which costs
# ≈ 15 % less CPU without the dynamic loader (BenchmarkScriptRun, BENCHMARKS.md).
EXECUTORS := ./executor/cmd/ejcloud-executor
VERSION  := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X github.com/ejcloud/ejcloud/executor.Version=$(VERSION)

.PHONY: build test run bench fuzz lint soak zookeeper databases chromium compiler clean images static docker-test docker-engine busybox-static ca-certificates

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(BINARIES)
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(EXECUTORS)
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/sdk-executor ./executor/examples/sdk-executor

# Tests need a real ZooKeeper (Debian's zookeeper package), and the event trace's tests a real
# PostgreSQL and MariaDB (Debian's postgresql and mariadb-server packages, started by the tests
# themselves in temporary directories); install them when they are missing.
# They run under no-leftovers, which fails the run if any process they started (executors'
# scripts included) is still alive after `go test` ends. The slow packages' tests are marked
# t.Parallel, TEST_PARALLEL at once per package: two by default, as four at a time on 2 cores
# timing-sensitive tests fail now and then (README, "Tests").
TEST_PARALLEL ?= 2
test: zookeeper databases chromium compiler
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/no-leftovers ./internal/cmd/no-leftovers
	$(BIN)/no-leftovers $(GO) test -race -count=1 -timeout 14m -parallel $(TEST_PARALLEL) ./...
	# The store's tests once more through the leader's model (state/mirror.go).
	EJCLOUD_TEST_MIRROR=1 $(GO) test -race -count=1 -parallel $(TEST_PARALLEL) ./state

run: build zookeeper
	./docker/run-local.sh

bench: zookeeper databases
	$(GO) test -run '^$$' -bench . -benchmem ./...

# A short fuzzing pass over every fuzz target; the seed corpora run in `make test` already.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 30s $$pkg; \
	  done; done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

zookeeper:
	@if [ ! -f $(ZK_JAR) ]; then \
	  echo "ZooKeeper is missing: installing Debian's zookeeper package"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q zookeeper; \
	fi

# The packages' own services are not used (nor started: policy-rc.d refuses them while they
# install); the tests run their own servers as the packages' postgres and mysql users.
databases:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; }; then \
	  echo "PostgreSQL or MariaDB is missing: installing Debian's postgresql and mariadb-server packages"; \
	  own=; if [ ! -e /usr/sbin/policy-rc.d ]; then own=1; printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod +x /usr/sbin/policy-rc.d; fi; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q postgresql mariadb-server; rc=$$?; \
	  if [ -n "$$own" ]; then $(SUDO) rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; \
	fi

# `go test -race` needs cgo, and cgo a C compiler, which a minimal Debian has not.
compiler:
	@if ! command -v "$$($(GO) env CC)" >/dev/null; then \
	  echo "no C compiler (go test -race needs cgo): installing Debian's gcc"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q gcc libc6-dev; \
	fi

# The console's browser tests (integration/console_test.go) drive Debian's chromium headless.
chromium:
	@if ! command -v chromium >/dev/null; then \
	  echo "chromium is missing: installing Debian's chromium (the console's browser tests)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; \
	fi

clean:
	rm -rf $(BIN)

# The soak (not part of `make test`): SOAK_JOBS (60) jobs × 5 shards every 10 s under a seeded
# menu of faults (executor, leader and ZooKeeper kills and hangs, agent restarts and partitions,
# the leader cut off from the master), then an
# exactly-once audit of every fire from the status updates and from what the scripts recorded.
# SOAK_DURATION (10m), SOAK_FAULT_EVERY (15s); SOAK_SEED replays a run's fault sequence (its
# seed is printed first). 60 jobs (30 shard runs/s) leaves two cores room to spare; they carry
# about 145 shard runs/s (300 jobs) through every fault, and past that the fires merge and
# every fault's window grows (see BENCHMARKS.md).
SOAK_DURATION ?= 10m
SOAK_FAULT_EVERY ?= 15s
SOAK_SEED ?=
SOAK_JOBS ?= 60
# SOAK_ENSEMBLE=1: over a 3-member ensemble with Debian's timing and a 15 s session, with hung
# (SIGSTOP 20 s: the quorum leader, the leader's member) and killed members in the menu.
SOAK_ENSEMBLE ?=
soak: zookeeper
	EJCLOUD_SOAK_DURATION=$(SOAK_DURATION) EJCLOUD_SOAK_FAULT_EVERY=$(SOAK_FAULT_EVERY) EJCLOUD_SOAK_SEED=$(SOAK_SEED) \
	EJCLOUD_SOAK_JOBS=$(SOAK_JOBS) EJCLOUD_SOAK_ENSEMBLE=$(SOAK_ENSEMBLE) \
		$(GO) test -tags soak -run '^TestSoak$$' -count=1 -timeout 0 -v ./integration/

# Images (docker/): ejcloud/scheduler and ejcloud/executor, tagged IMAGE_TAG. DOCKER_BASE=public
# builds them in GO_IMAGE on the public base images (BASE_IMAGE, EXECUTOR_BASE_IMAGE: a site's
# own registry may stand in); local builds them FROM scratch around the static binaries
# compiled here (bin/static), with Debian's busybox-static as the executor image's /bin/sh;
# auto (the default) tries to pull GO_IMAGE once and falls back to local (docker/images.sh).
DOCKER_BASE ?= auto
IMAGE_TAG   ?= latest
GO_IMAGE    ?= golang:1.26-bookworm
BASE_IMAGE  ?=
EXECUTOR_BASE_IMAGE ?=
images: static busybox-static ca-certificates
	DOCKER_BASE=$(DOCKER_BASE) IMAGE_TAG=$(IMAGE_TAG) GO_IMAGE=$(GO_IMAGE) BASE_IMAGE=$(BASE_IMAGE) \
	EXECUTOR_BASE_IMAGE=$(EXECUTOR_BASE_IMAGE) STATIC_BIN=$(CURDIR)/$(BIN)/static ./docker/images.sh

static:
	@mkdir -p $(BIN)/static
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/static/ \
		./scheduler/cmd/ejcloud-scheduler ./executor/cmd/ejcloud-executor

busybox-static:
	@if [ "$$(dpkg-query -W -f='$${Status}' busybox-static 2>/dev/null)" != "install ok installed" ]; then \
	  echo "busybox-static is missing: installing Debian's busybox-static (the executor image's /bin/sh)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q busybox-static; \
	fi

# The images' trusted roots (docker/images.sh copies the bundle, unless CA_CERTIFICATES names one).
ca-certificates:
	@if [ -z "$$CA_CERTIFICATES" ] && [ ! -f /etc/ssl/certs/ca-certificates.crt ]; then \
	  echo "the CA bundle is missing: installing Debian's ca-certificates (the images' trusted roots)"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q ca-certificates; \
	fi

# The Docker engine (Debian's docker.io) and docker-compose, for `make docker-test`.
docker-engine:
	@if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null; then \
	  echo "dockerd or docker-compose is missing: installing Debian's docker.io and docker-compose"; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q docker.io docker-compose; \
	fi

# The images, proven to run (docker/image_test.go): with a private dockerd when none is running
# (docker/with-dockerd.sh: its own data root and socket, no bridge; removed afterwards), builds
# the images, then runs ZooKeeper and mesos-local on the host and the scheduler image with host
# networking, a sharded job through it, and its failover to a second scheduler container; and
# validates docker/docker-compose.yml with docker-compose.
docker-test: zookeeper docker-engine
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/no-leftovers ./internal/cmd/no-leftovers
	./docker/with-dockerd.sh sh -c '$(MAKE) --no-print-directory images && \
		EJCLOUD_SCHEDULER_IMAGE=ejcloud/scheduler:$(IMAGE_TAG) EJCLOUD_EXECUTOR_IMAGE=ejcloud/executor:$(IMAGE_TAG) \
		$(BIN)/no-leftovers $(GO) test -tags dockertest -count=1 -timeout 10m -v ./docker/'
