# The ejcloud executor image: the executor binary for agents that run apps in containers, or
# as a base for an app image that adds its own job code (see executor/job for Go jobs). Build
# from the repository root:
#   docker build -f docker/executor.Dockerfile -t ejcloud/executor .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ejcloud-executor ./executor/cmd/ejcloud-executor

FROM debian:bookworm-slim
COPY --from=build /out/ejcloud-executor /usr/local/bin/
# The agent starts it with the MESOS_* environment of the v1 executor API.
ENTRYPOINT ["/usr/local/bin/ejcloud-executor"]
