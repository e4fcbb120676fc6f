# The ejcloud scheduler image. Build from the repository root:
#   docker build -f docker/scheduler.Dockerfile -t ejcloud/scheduler .
# or `make images`, which falls back to scheduler.local.Dockerfile where no base image can be
# pulled. A site with its own registry points the base images there:
#   --build-arg GO_IMAGE=registry.example/golang:1.26-bookworm --build-arg BASE_IMAGE=…
# It also carries the executor binary, which the scheduler serves to the agents at
# GET /executor/ejcloud-executor (an app's appURL may point there).
ARG GO_IMAGE=golang:1.26-bookworm
# No shell, no package manager: CA certificates, /etc/passwd with the non-root user 65532
# ("nonroot") and time zones (also embedded in the binary: time/tzdata) are all it needs.
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces go-zookeeper with the patched copy there (third_party/zk/PATCHED.md).
COPY third_party ./third_party
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/ejcloud-scheduler ./scheduler/cmd/ejcloud-scheduler && \
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/ejcloud-executor ./executor/cmd/ejcloud-executor && \
    gzip -9 -n /out/ejcloud-executor

FROM ${BASE_IMAGE}
# The executor is kept gzipped (a third of its size); the scheduler serves it decompressed.
COPY --from=build /out/ejcloud-scheduler /out/ejcloud-executor.gz /usr/local/bin/
# Numeric, so that a runtime enforcing runAsNonRoot can tell without reading /etc/passwd.
USER 65532:65532
EXPOSE 8899
# Every flag can also be set as EJCLOUD_<FLAG> (e.g. EJCLOUD_AUTH_ROOT): the API refuses to
# listen on a non-loopback address without --auth-root, and to take those credentials over plain
# HTTP there without either EJCLOUD_TLS_CERT_FILE and EJCLOUD_TLS_KEY_FILE (HTTPS) or an explicit
# EJCLOUD_INSECURE_HTTP=true.
ENTRYPOINT ["/usr/local/bin/ejcloud-scheduler"]
CMD ["--http-addr", "0.0.0.0:8899", "--executor-binary", "/usr/local/bin/ejcloud-executor.gz"]
