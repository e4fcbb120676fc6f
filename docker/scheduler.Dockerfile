# The ejcloud scheduler image. Build from the repository root:
#   docker build -f docker/scheduler.Dockerfile -t ejcloud/scheduler .
# It also carries the executor binary, which the scheduler serves to the agents at
# GET /executor/ejcloud-executor (an app's appURL may point there).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ejcloud-scheduler ./scheduler/cmd/ejcloud-scheduler && \
    CGO_ENABLED=0 go build -trimpath -o /out/ejcloud-executor ./executor/cmd/ejcloud-executor

FROM debian:bookworm-slim
RUN useradd --system --no-create-home ejcloud
COPY --from=build /out/ejcloud-scheduler /out/ejcloud-executor /usr/local/bin/
USER ejcloud
EXPOSE 8899
# Every flag can also be set as EJCLOUD_<FLAG> (e.g. EJCLOUD_AUTH_ROOT): the API refuses to
# listen on a non-loopback address without --auth-root, and to take those credentials over plain
# HTTP there without either EJCLOUD_TLS_CERT_FILE and EJCLOUD_TLS_KEY_FILE (HTTPS) or an explicit
# EJCLOUD_INSECURE_HTTP=true.
ENTRYPOINT ["/usr/local/bin/ejcloud-scheduler"]
CMD ["--http-addr", "0.0.0.0:8899", "--executor-binary", "/usr/local/bin/ejcloud-executor"]
