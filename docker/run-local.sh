#!/usr/bin/env bash
# The `make run` environment: a local ZooKeeper (data in .run/zk, kept between runs), mesos-local
# with two agents (sandboxes in .run/mesos) and the scheduler, with root credentials generated on
# the first run (kept in .run/credentials) and a demo app and jobs registered. A second run reuses
# all of it. Ctrl-C stops everything this script started, executors included.
#
# Each run logs into a folder of its own, .run/logs/<date-time>/, with .run/logs/latest naming
# the newest, so an earlier run's logs are kept.
#
# Overridable (the integration test runs it on free ports): EJCLOUD_RUN_DIR, EJCLOUD_RUN_BIN,
# EJCLOUD_RUN_ZK_PORT, EJCLOUD_RUN_MESOS_ADDR, EJCLOUD_HTTP_ADDR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=${EJCLOUD_RUN_DIR:-$root/.run}
bin=${EJCLOUD_RUN_BIN:-$root/bin}
# Absolute, whatever was given: the event trace's SQLite DSN and the agents' sandboxes need it.
mkdir -p "$run"
run=$(cd "$run" && pwd)
bin=$(cd "$bin" && pwd)
zk_port=${EJCLOUD_RUN_ZK_PORT:-2181}
http_addr=${EJCLOUD_HTTP_ADDR:-127.0.0.1:8899}
mesos_addr=${EJCLOUD_RUN_MESOS_ADDR:-127.0.0.1:5050}
show() { echo "${1#"$root/"}"; } # a path as the user, in the project root, would type it

pids=()
stop() {
  trap - EXIT INT TERM
  # In reverse order of starting: the scheduler before Mesos, Mesos (and its executors) before
  # ZooKeeper, each waited for.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM -- "-${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  [ ${#pids[@]} = 0 ] || echo "stopped."
}
trap stop EXIT
trap 'exit 130' INT TERM

port_open() { (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; } # host:port
zk_ok() { # "imok" comes without a newline, so read fails at EOF but still fills ans
  local ans=""
  { exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && printf ruok >&3 && read -r -t 2 ans <&3; } 2>/dev/null
  [ "$ans" = imok ]
}
# request METHOD PATH [BODY]: one HTTP/1.0 request to the scheduler, with the root credentials
# (bash's /dev/tcp: a fresh Debian machine may have no curl); prints the status code.
request() {
  local host=${http_addr%:*} port=${http_addr##*:} body=${3:-} status=""
  {
    exec 3<>"/dev/tcp/$host/$port" &&
      printf '%s %s HTTP/1.0\r\nAuthorization: Basic %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
        "$1" "$2" "$(printf %s "$creds" | base64 -w0)" "${#body}" "$body" >&3 &&
      read -r -t 5 _ status _ <&3
  } 2>/dev/null || true
  exec 3<&- 2>/dev/null || true
  echo "${status:-000}"
}
ready_ok() { [ "$(request GET /readyz)" = 200 ]; }
wait_for() { # what, check, log: polls until check passes, the process dies, or 60 s pass
  local pid=${pids[${#pids[@]} - 1]}
  for _ in $(seq 1 300); do
    "$2" && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$1 exited while starting; see $(show "$3"):" >&2; tail -20 "$3" >&2; exit 1
    fi
    sleep 0.2
  done
  echo "$1 did not come up within 60 s; see $(show "$3"):" >&2; tail -20 "$3" >&2; exit 1
}

# Every port first, before anything starts: something else listening there would be talked to
# as if it were ours (a foreign scheduler answers 401, a foreign Mesos takes our framework).
check_port() { # addr, what, the variable that moves it
  if port_open "$1"; then
    echo "$1 (for $2) is in use: stop what listens there, or move it: make run $3" >&2
    busy=1
  fi
}
busy=0
check_port "127.0.0.1:$zk_port" ZooKeeper "EJCLOUD_RUN_ZK_PORT=<port>"
check_port "$mesos_addr" mesos-local "EJCLOUD_RUN_MESOS_ADDR=127.0.0.1:<port>"
check_port "$http_addr" "the scheduler" "EJCLOUD_HTTP_ADDR=127.0.0.1:<port>"
[ "$busy" = 0 ] || exit 1

mkdir -p "$run/zk/data" "$run/mesos"
logs="$run/logs/$(date +%Y%m%d-%H%M%S)"
[ -e "$logs" ] && logs="$logs-$$"
mkdir -p "$logs"
ln -sfn "$(basename "$logs")" "$run/logs/latest"
cat > "$run/zk/zoo.cfg" <<CFG
tickTime=2000
dataDir=$run/zk/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
cp="/usr/share/java/zookeeper.jar"
[ -f /usr/share/java/slf4j-nop.jar ] && cp="$cp:/usr/share/java/slf4j-nop.jar"
setsid java -Xmx256m -Dzookeeper.admin.enableServer=false -cp "$cp" \
  org.apache.zookeeper.server.ZooKeeperServerMain "$run/zk/zoo.cfg" >"$logs/zookeeper.log" 2>&1 &
pids+=($!)
wait_for ZooKeeper zk_ok "$logs/zookeeper.log"
echo "ZooKeeper     127.0.0.1:$zk_port (data in ${run#"$root/"}/zk)"

setsid "$bin/mesos-local" --addr "$mesos_addr" --agents 2 --work-dir "$run/mesos" \
  >"$logs/mesos-local.log" 2>&1 &
pids+=($!)
mesos_ok() { grep -q "mesos-local: master" "$logs/mesos-local.log"; }
wait_for mesos-local mesos_ok "$logs/mesos-local.log"
echo "Mesos         http://$mesos_addr  (state: /master/state; faults: POST /local/agents/{id}/{partition|heal|kill|restart|gone})"

# Root credentials: generated once, kept with the rest of the state.
if [ ! -s "$run/credentials" ]; then
  (umask 077; printf 'root:%s\n' "$(head -c 18 /dev/urandom | base64 | tr -d '/+=')" >"$run/credentials")
fi
creds=$(cat "$run/credentials")

# The credentials go by the environment, not the command line, which every local user can read.
EJCLOUD_AUTH_ROOT="$creds" setsid "$bin/ejcloud-scheduler" --zk-servers "127.0.0.1:$zk_port" --http-addr "$http_addr" \
  --mesos-url "http://$mesos_addr" --event-trace-db "sqlite://$run/trace.db" \
  >"$logs/scheduler.log" 2>&1 &
pids+=($!)
wait_for "the scheduler" ready_ok "$logs/scheduler.log"

# The demo: an app running the stock executor the scheduler serves, a TRANSIENT SCRIPT job of
# 4 shards every 10 s and a DAEMON job. A second run finds them registered (409) and keeps them.
register() { # what, method, path, body
  local code
  code=$(request "$2" "$3" "$4")
  case $code in
  204) echo "registered    $1" ;;
  409) echo "kept          $1 (registered by an earlier run)" ;;
  *) echo "registering $1 failed with HTTP $code; see $(show "$logs/scheduler.log")" >&2; exit 1 ;;
  esac
}
register "app demo-app" POST /api/app '{"appName":"demo-app","appURL":"http://'"$http_addr"'/executor/ejcloud-executor","bootstrapScript":"./ejcloud-executor","cpuCount":0.1,"memoryMB":64,"appCacheEnable":true}'
register "job demo-script (TRANSIENT, every 10 s, 4 shards)" POST /api/job/register '{"jobName":"demo-script","appName":"demo-app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"*/10 * * * * ?","shardingTotalCount":4,"cpuCount":0.1,"memoryMB":32,"failover":true,"scriptCommandLine":"echo \"demo-script shard $EJCLOUD_SHARDING_ITEM ran at $(date +%T)\"","description":"make run demo: look for its output in the sandboxes"}'
register "job demo-daemon (DAEMON, every 5 s)" POST /api/job/register '{"jobName":"demo-daemon","appName":"demo-app","jobType":"SCRIPT","jobExecutionType":"DAEMON","cron":"*/5 * * * * ?","shardingTotalCount":1,"cpuCount":0.1,"memoryMB":32,"scriptCommandLine":"echo \"demo-daemon ran at $(date +%T)\"","description":"make run demo: a long-running task that runs its script on its own cron"}'

echo
echo "API           http://$http_addr   user:password $creds   (the web console: http://$http_addr/ with these credentials)"
echo "              e.g. curl -u \"\$(cat ${run#"$root/"}/credentials)\" http://$http_addr/api/job/tasks/running"
echo "History       the event trace in $run/trace.db (SQLite): /api/job/events/executions, /api/job/statistics/…"
echo "Scheduler     health /healthz, leadership /readyz, metrics /metrics"
echo "Logs          $(show "$logs")/ (earlier runs' beside it)   sandboxes $(show "$run/mesos")/"
echo "Press Ctrl-C to stop everything (pids ${pids[*]})."
wait -n "${pids[@]}" || true
echo "a process exited; see $(show "$logs")/" >&2
