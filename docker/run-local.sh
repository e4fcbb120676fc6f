#!/usr/bin/env bash
# The `make run` environment: a local ZooKeeper (data in .run/zk, kept between runs), mesos-local
# with two agents (sandboxes in .run/mesos) and the scheduler. Ctrl-C stops everything this script
# started, executors included.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run="$root/.run"
zk_port=${EJCLOUD_RUN_ZK_PORT:-2181}
http_addr=${EJCLOUD_HTTP_ADDR:-127.0.0.1:8899}
mesos_addr=${EJCLOUD_RUN_MESOS_ADDR:-127.0.0.1:5050}
mkdir -p "$run/zk/data" "$run/logs" "$run/mesos"

pids=()
stop() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopped."
}
trap stop EXIT
trap 'exit 130' INT TERM

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
zk_ok() { # "imok" comes without a newline, so read fails at EOF but still fills ans
  local ans=""
  { exec 3<>"/dev/tcp/127.0.0.1/$zk_port" && printf ruok >&3 && read -r -t 2 ans <&3; } 2>/dev/null
  [ "$ans" = imok ]
}
http_ok() {
  local host=${http_addr%:*} port=${http_addr##*:}
  { exec 3<>"/dev/tcp/$host/$port" && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && read -r -t 2 status <&3 && [[ $status == *" 200 "* ]]; } 2>/dev/null
}
wait_for() { # what, check, log
  for _ in $(seq 1 300); do "$2" && return 0; sleep 0.2; done
  echo "$1 did not come up; see $3" >&2; tail -20 "$3" >&2; exit 1
}

if port_open "$zk_port"; then
  echo "port $zk_port is in use: stop what is there, or set EJCLOUD_RUN_ZK_PORT" >&2; exit 1
fi
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
  org.apache.zookeeper.server.ZooKeeperServerMain "$run/zk/zoo.cfg" >"$run/logs/zookeeper.log" 2>&1 &
pids+=($!)
wait_for ZooKeeper zk_ok "$run/logs/zookeeper.log"
echo "ZooKeeper     127.0.0.1:$zk_port (data in .run/zk)"

setsid "$root/bin/mesos-local" --addr "$mesos_addr" --agents 2 --work-dir "$run/mesos" \
  >"$run/logs/mesos-local.log" 2>&1 &
pids+=($!)
mesos_ok() { grep -q "mesos-local: master" "$run/logs/mesos-local.log"; }
wait_for mesos-local mesos_ok "$run/logs/mesos-local.log"
echo "Mesos         http://$mesos_addr  (state: /master/state; faults: POST /local/agents/{id}/{partition|heal|kill|restart|gone})"

setsid "$root/bin/ejcloud-scheduler" --zk-servers "127.0.0.1:$zk_port" --http-addr "$http_addr" \
  --mesos-url "http://$mesos_addr" \
  >"$run/logs/scheduler.log" 2>&1 &
pids+=($!)
wait_for "the scheduler" http_ok "$run/logs/scheduler.log"
echo "Scheduler     http://$http_addr  (health: /healthz, leadership: /readyz)"
echo "Logs          .run/logs/"
echo "Press Ctrl-C to stop everything."
wait -n "${pids[@]}" || true
echo "a process exited; see .run/logs/" >&2
