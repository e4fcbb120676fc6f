#!/usr/bin/env bash
# `make images`: builds ejcloud/scheduler and ejcloud/executor (tagged $IMAGE_TAG) with the
# Docker engine that `docker` reaches.
#
# DOCKER_BASE=public builds docker/{scheduler,executor}.Dockerfile, whose build stage compiles
# in $GO_IMAGE and whose final stage is $BASE_IMAGE / $EXECUTOR_BASE_IMAGE (public images by
# default; a site points them at its own registry). DOCKER_BASE=local pulls nothing: it builds
# docker/*.local.Dockerfile FROM scratch around the static binaries `make images` compiled in
# bin/static (CGO_ENABLED=0), with the host's CA certificates and, in the executor image,
# Debian's busybox-static as /bin/sh. DOCKER_BASE=auto (the default) tries to pull $GO_IMAGE
# once (unless the engine has it) and takes local when that fails within $PULL_TIMEOUT s.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=${DOCKER_BASE:-auto}
tag=${IMAGE_TAG:-latest}
go_image=${GO_IMAGE:-golang:1.26-bookworm}
static=${STATIC_BIN:-$root/bin/static}
busybox=${BUSYBOX:-/bin/busybox}
certs=${CA_CERTIFICATES:-/etc/ssl/certs/ca-certificates.crt}

if [ "$base" = auto ]; then
  if docker image inspect "$go_image" >/dev/null 2>&1 ||
    timeout "${PULL_TIMEOUT:-30}" docker pull -q "$go_image" >/dev/null 2>&1; then
    base=public
  else
    base=local
    echo "images: $go_image cannot be pulled: building FROM scratch around local binaries (DOCKER_BASE=local)"
  fi
fi

case $base in
public)
  args=(--build-arg "GO_IMAGE=$go_image")
  [ -z "${BASE_IMAGE:-}" ] || args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
  # The build stage downloads Go modules: host networking works also with an engine started
  # with --bridge=none.
  docker build --network host "${args[@]}" -f docker/scheduler.Dockerfile -t "ejcloud/scheduler:$tag" .
  args=(--build-arg "GO_IMAGE=$go_image")
  [ -z "${EXECUTOR_BASE_IMAGE:-}" ] || args+=(--build-arg "BASE_IMAGE=$EXECUTOR_BASE_IMAGE")
  docker build --network host "${args[@]}" -f docker/executor.Dockerfile -t "ejcloud/executor:$tag" .
  ;;
local)
  for f in "$static/ejcloud-scheduler" "$static/ejcloud-executor" "$busybox" "$certs"; do
    [ -f "$f" ] || { echo "images: $f is missing (make images builds and installs what it needs)" >&2; exit 1; }
  done
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/ejcloud-images-XXXXXX")
  trap 'rm -rf "$ctx"' EXIT
  # The user of distroless' :nonroot, so that both routes give the same image.
  mkdir -p "$ctx/scheduler" "$ctx/executor/bin" "$ctx/executor/root/tmp"
  for d in "$ctx/scheduler" "$ctx/executor"; do
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/passwd"
    printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$d/group"
    cp "$certs" "$d/ca-certificates.crt"
  done
  cp "$static/ejcloud-scheduler" "$ctx/scheduler/"
  gzip -9 -n -c "$static/ejcloud-executor" >"$ctx/scheduler/ejcloud-executor.gz"
  cp "$static/ejcloud-executor" "$ctx/executor/"
  cp "$busybox" "$ctx/executor/bin/busybox"
  for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$ctx/executor/bin/$applet"
  done
  chmod 1777 "$ctx/executor/root/tmp" # COPY keeps the mode of a directory it copies, not of its destination
  docker build -f docker/scheduler.local.Dockerfile -t "ejcloud/scheduler:$tag" "$ctx/scheduler"
  docker build -f docker/executor.local.Dockerfile -t "ejcloud/executor:$tag" "$ctx/executor"
  ;;
*)
  echo "images: DOCKER_BASE must be auto, public or local, not $base" >&2
  exit 2
  ;;
esac
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' "ejcloud/*:$tag"
