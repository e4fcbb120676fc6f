# The ejcloud executor image: the executor binary for agents that run apps in containers, or
# as a base for an app image that adds its own job code (see executor/job for Go jobs). Build
# from the repository root:
#   docker build -f docker/executor.Dockerfile -t ejcloud/executor .
# or `make images` (executor.local.Dockerfile where no base image can be pulled). SCRIPT jobs
# run under /bin/sh, so the base image needs one.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces go-zookeeper with the patched copy there (third_party/zk/PATCHED.md).
COPY third_party ./third_party
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/ejcloud-executor ./executor/cmd/ejcloud-executor

FROM ${BASE_IMAGE}
COPY --from=build /out/ejcloud-executor /usr/local/bin/
# The agent starts it with the MESOS_* environment of the v1 executor API.
ENTRYPOINT ["/usr/local/bin/ejcloud-executor"]
