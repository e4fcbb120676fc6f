#!/usr/bin/env bash
# with-dockerd.sh COMMAND [ARGS...]: runs COMMAND against a Docker engine. When `docker` reaches
# one already (DOCKER_HOST or the default socket), that one; otherwise a private dockerd of this
# script's own, as root: its data root, exec root, pid file, config and unix socket in a fresh
# temporary directory, --bridge=none and no iptables rules (every container uses host
# networking, nothing leaves loopback). That engine, with its containers, images and its
# containerd, is stopped and its directory removed when COMMAND ends, whatever its exit status,
# and also on Ctrl-C or SIGTERM. The exit status is COMMAND's.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: with-dockerd.sh COMMAND [ARGS...]" >&2; exit 2; }

if docker info >/dev/null 2>&1; then
  exec "$@"
fi
command -v dockerd >/dev/null || { echo "with-dockerd: no dockerd: apt-get install docker.io (make docker-engine)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "with-dockerd: no Docker engine is running and starting one needs root" >&2; exit 1; }

dir=$(mktemp -d /tmp/ejcloud-dockerd-XXXXXX)
pid=""
# What dockerd and its containerd create outside their roots whatever the flags: the daemon's
# key, containerd's plugin and shim directories, Docker's plugin directory. Those that are not
# there now are removed afterwards (deepest first; rmdir only removes empty directories).
outside=(/etc/docker/key.json /opt/containerd/bin /opt/containerd/lib /opt/containerd
  /run/containerd/s /run/containerd /run/docker/plugins /run/docker)
created=()
for p in "${outside[@]}"; do [ -e "$p" ] || created+=("$p"); done
stop() {
  local status=$?
  trap - EXIT INT TERM
  set +e +o pipefail # every step of the clean-up is tried, whatever an earlier one did
  if [ -n "$pid" ]; then
    # Containers first, so that none outlives the engine (dockerd would also kill them on
    # SIGTERM, but waits for each one's stop timeout).
    ids=$(docker ps -aq 2>/dev/null || true)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "with-dockerd: dockerd (pid $pid) did not stop within 30 s: killing it" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    # A dockerd killed before unmounting leaves its overlay mounts under the data root.
    grep -o " $dir/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  fi
  if [ "$status" != 0 ] && [ -f "$dir/dockerd.log" ]; then
    echo "with-dockerd: the private dockerd's last lines:" >&2
    tail -20 "$dir/dockerd.log" >&2
  fi
  rm -rf "$dir"
  for p in "${created[@]}"; do
    if [ -d "$p" ]; then rmdir "$p" 2>/dev/null || true; else rm -f "$p"; fi
  done
  exit "$status"
}
trap stop EXIT
child=""
# On Ctrl-C or SIGTERM the command's process group gets SIGTERM (it runs in a session of its
# own, see below; SIGINT would not do: a non-interactive shell starts background commands with
# SIGINT ignored), and is waited for before the engine goes.
on_signal() {
  [ -z "$child" ] || { kill -TERM -- "-$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; }
  exit 130
}
trap on_signal INT TERM

echo '{}' >"$dir/daemon.json"
export DOCKER_HOST="unix://$dir/docker.sock"
# setsid: its own process group, so that a Ctrl-C at the terminal reaches this script (which
# stops the engine in order) and not dockerd directly.
setsid dockerd --config-file "$dir/daemon.json" --data-root "$dir/data" --exec-root "$dir/exec" \
  --pidfile "$dir/dockerd.pid" --host "$DOCKER_HOST" --bridge=none --iptables=false --ip6tables=false \
  --ip-forward=false --ip-masq=false --containerd-namespace ejcloud-test \
  --containerd-plugins-namespace ejcloud-test-plugins >"$dir/dockerd.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  docker info >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { echo "with-dockerd: dockerd exited while starting" >&2; exit 1; }
  sleep 0.1
done
docker info >/dev/null 2>&1 || { echo "with-dockerd: dockerd did not answer within 30 s" >&2; exit 1; }
echo "with-dockerd: a private dockerd (pid $pid) at $DOCKER_HOST"
# In the background and waited for: bash runs a trap only once a foreground command ends, and
# the engine must go at once when this script is told to stop.
setsid "$@" &
child=$!
wait "$child"
