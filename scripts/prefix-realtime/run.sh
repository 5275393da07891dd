#!/usr/bin/env bash
# Replays the first ROWS requests of a Mooncake trace in real time through the
# embedded gateway in front of four `llmesh sim` engines, once per routing
# (endpoint-aware, prefix-aware), S times faster than the trace (the engines
# run with --time-scale S, the trace with --trace-speed S, so the engines see
# the trace's own load), and runs `llmesh bench simulate` on the same
# arrivals in virtual time for comparison. docs/results/prefix-realtime.md
# shows what it measured.
#
# usage: scripts/prefix-realtime/run.sh LLMESH TRACE ROWS S OUTDIR [CPUS [ROUTINGS [PORT]]]
# CPUS is a taskset list for every process, e.g. 0-7 ("" for none);
# ROUTINGS a space-separated subset of "endpoint-aware prefix-aware" (the
# mesh bench/meshes/trace-ROUTING.yaml each); PORT the first of the loopback
# ports used (default 19000; each routing takes 20 from there).
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 LLMESH TRACE ROWS S OUTDIR [CPUS [ROUTINGS [PORT]]]" >&2
  exit 2
fi
llmesh=$(realpath "$1") trace=$2 rows=$3 speed=$4 out=$5 cpus=${6:-}
routings=${7:-endpoint-aware prefix-aware} port=${8:-19000}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(realpath "$out")
pin=()
[ -n "$cpus" ] && pin=(taskset -c "$cpus")
head -n "$rows" "$trace" > "$out/trace.jsonl"
# The standard workload's classes, over the whole slice (no 60 s stop, no
# warm-up: every request is measured in both times).
workload=$out/workload.yaml
sed -e 's/^duration: 60s/duration: 100000s/' -e 's/^  duration: 5s/  duration: 0s/' \
  "$root/bench/workloads/mixed-priority.yaml" > "$workload"

pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop EXIT

wait_port() { # port: until something listens on 127.0.0.1:port
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "nothing listens on 127.0.0.1:$1" >&2; return 1
}

for routing in $routings; do
  metrics=()
  for i in 0 1 2 3; do
    p=$((port + i))
    "${pin[@]}" "$llmesh" sim --listen 127.0.0.1:$p --time-scale "$speed" > "$out/sim-$routing-$i.log" 2>&1 &
    pids+=($!)
    export LLMESH_SIM$i=127.0.0.1:$p
    metrics+=(http://127.0.0.1:$p/metrics)
  done
  export LLMESH_LISTEN_PORT=$((port + 10))
  for i in 0 1 2 3; do wait_port $((port + i)); done
  "${pin[@]}" "$llmesh" gateway --config "$root/bench/meshes/trace-$routing.yaml" > "$out/gateway-$routing.log" 2>&1 &
  pids+=($!)
  wait_port "$LLMESH_LISTEN_PORT"
  "${pin[@]}" "$llmesh" bench run --quiet --workload "$workload" --trace "$out/trace.jsonl" \
    --trace-speed "$speed" --requests "$rows" --max-lag 50ms \
    --target "http://127.0.0.1:$LLMESH_LISTEN_PORT" \
    --engine-metrics "$(IFS=,; echo "${metrics[*]}")" \
    --json "$out/realtime-$routing.json" > "$out/realtime-$routing.txt" 2>&1 || echo "bench run ($routing) exit $?" >&2
  stop
  port=$((port + 20))
  "${pin[@]}" "$llmesh" bench simulate --workload "$workload" --trace "$out/trace.jsonl" --engines 4 \
    --routing "$routing" --policies fifo --brief \
    --json "$out/virtual-$routing.json" > "$out/virtual-$routing.txt" 2>&1 || echo "bench simulate ($routing) exit $?" >&2
done
echo "results in $out"
