#!/usr/bin/env bash
# Load test of ShouldRateLimit with ghz, started by `make ghz` (which builds first).
#
# Starts the built server (memory store, limits from examples/, statsd off) on free local ports,
# runs ghz with test/load/ghz.json aimed at it, prints the answers by overall code from the server's
# /metrics (OK and OVER_LIMIT are both gRPC OK: ghz's summary cannot tell them apart), then stops
# the server.
#   make ghz GHZ_DURATION=60s GHZ_CONCURRENCY=100 GHZ_CONNECTIONS=8   # ghz flags -z, -c, --connections
#   make ghz GHZ_TOTAL=2000                            # a number of calls instead of a duration (-n N -z 0)
#   make ghz GHZ_REFLECTION=1                          # no .proto: ghz asks the server (gRPC reflection)
#   bash test/load/run-ghz.sh -O html -o report.html   # extra arguments go to ghz (flags override the config file);
#                                                      # with -O and no -o the split goes to stderr
#   bash test/load/run-ghz.sh -z 5s                    # ghz's own -z/--duration, -n/--total, -c/--concurrency and
#   bash test/load/run-ghz.sh -n 500                   # --connections replace the GHZ_* ones; -n alone also
#                                                      # replaces the file's duration (-z 0 is added)
#   bash test/load/run-ghz.sh --smoke                  # no ghz: send each message of ghz.json once
# Server settings pass through (BACKEND_TYPE=redis REDIS_URL=localhost:6379 make ghz).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

smoke=0
if [[ "${1:-}" == "--smoke" ]]; then
  smoke=1
  shift
fi

if [[ $smoke == 0 ]] && ! command -v ghz >/dev/null 2>&1; then
  echo "ghz not found: install ghz (docs/deploy.md, Load testing with ghz): a release binary from https://github.com/bojand/ghz/releases, or go install github.com/bojand/ghz/cmd/ghz@v0.121.0 (Go 1.23 or later; v0.120.0 declares Go 1.18)" >&2
  exit 127
fi

if [[ ! -f dist/src/main.js ]] || [[ ! -f dist/test/load/ghz-answers.js ]] || { [[ $smoke == 1 ]] && [[ ! -f dist/test/load/ghz-data.js ]]; }; then
  echo "the server is not built: run make build (make ghz builds it)" >&2
  exit 1
fi

# Three free ports (gRPC, HTTP, debug), so a running instance on 8081/8080/6070 is left alone.
read -r grpc_port http_port debug_port < <(node -e '
  const net = require("node:net");
  const servers = [0, 1, 2].map(() => net.createServer());
  Promise.all(servers.map((s) => new Promise((r) => s.listen(0, "127.0.0.1", () => r(s.address().port)))))
    .then((ports) => { console.log(ports.join(" ")); servers.forEach((s) => s.close()); });
')

log=$(mktemp -t slidegate-ghz.XXXXXX.log)
config=$(mktemp -t slidegate-ghz.XXXXXX.json)
before=$(mktemp -t slidegate-ghz.XXXXXX.prom)

# No statsd agent listens here: the reference's default (USE_STATSD=true) would only log send errors.
GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port HOST=127.0.0.1 PORT=$http_port DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_port \
  CONFIG_PATH="${CONFIG_PATH:-examples}" BACKEND_TYPE="${BACKEND_TYPE:-memory}" LOG_LEVEL="${LOG_LEVEL:-warn}" \
  USE_STATSD="${USE_STATSD:-false}" node dist/src/main.js >"$log" 2>&1 &
server=$!

stop_server() {
  if kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -f "$config" "$log" "$before"
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# Ready when /healthcheck answers 200: config loaded, store reachable.
ready=0
for _ in $(seq 100); do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "the server exited during start:" >&2
    cat "$log" >&2
    exit 1
  fi
  if node -e '
    require("node:http").get(process.argv[1], (r) => process.exit(r.statusCode === 200 ? 0 : 1)).on("error", () => process.exit(1));
  ' "http://127.0.0.1:$http_port/healthcheck"; then
    ready=1
    break
  fi
  sleep 0.1
done
if [[ $ready == 0 ]]; then
  echo "the server did not become healthy within 10 s:" >&2
  cat "$log" >&2
  exit 1
fi

# ghz.json with the server's address; paths in it are relative to the repository root (the cwd).
# GHZ_REFLECTION=1 leaves the .proto out: ghz then takes the descriptors from the server.
node -e '
  const c = JSON.parse(require("node:fs").readFileSync("test/load/ghz.json", "utf8"));
  c.host = process.argv[1];
  if (process.env.GHZ_REFLECTION === "1") { delete c.proto; delete c["import-paths"]; }
  process.stdout.write(JSON.stringify(c, null, 2));
' "127.0.0.1:$grpc_port" >"$config"

# Whether the caller's own arguments set ghz's flag -SHORT / --LONG, in any of the forms ghz reads
# (-z 5s, -z5s, --duration 5s, --duration=5s); pass "" for a flag without a short form.
caller_sets() {
  local short=$1 long=$2 arg
  for arg in ${caller_args[@]+"${caller_args[@]}"}; do
    [[ $arg == -- ]] && return 1
    [[ $arg == "--$long" || $arg == "--$long="* ]] && return 0
    [[ -n $short && $arg == "-$short"* ]] && return 0
  done
  return 1
}
caller_args=("$@")

# Flags given beside --config override its values (ghz v0.121.0: -z, -n, -c, --connections, -O, ...).
# ghz refuses a flag given twice ("flag 'duration' cannot be repeated"), so a flag the caller passes
# replaces the GHZ_* one instead of being added to it.
overrides=()
# A number of calls replaces the duration (with one set, ghz ignores -n): GHZ_TOTAL, or the caller's
# own -n without a -z, comes with -z 0 over ghz.json's duration.
if caller_sets z duration; then
  :
elif caller_sets n total || [[ -n "${GHZ_TOTAL:-}" ]]; then
  overrides+=(-z 0)
elif [[ -n "${GHZ_DURATION:-}" ]]; then
  overrides+=(-z "$GHZ_DURATION")
fi
[[ -n "${GHZ_TOTAL:-}" ]] && ! caller_sets n total && overrides+=(-n "$GHZ_TOTAL")
[[ -n "${GHZ_CONCURRENCY:-}" ]] && ! caller_sets c concurrency && overrides+=(-c "$GHZ_CONCURRENCY")
[[ -n "${GHZ_CONNECTIONS:-}" ]] && ! caller_sets "" connections && overrides+=(--connections "$GHZ_CONNECTIONS")

metrics="http://127.0.0.1:$http_port/metrics"
echo "slidegate on 127.0.0.1:$grpc_port (HTTP $http_port), config ${CONFIG_PATH:-examples}, store ${BACKEND_TYPE:-memory}" >&2
# Without /metrics (DISABLE_STATS=true) there is no split to print; the run goes on.
counted=1
node dist/test/load/ghz-answers.js snapshot "$metrics" "$before" || counted=0
status=0
if [[ $smoke == 1 ]]; then
  node dist/test/load/ghz-data.js "127.0.0.1:$grpc_port" "$config" || status=$?
else
  ghz --config "$config" ${overrides[@]+"${overrides[@]}"} "$@" || status=$?
fi
# Beside ghz's summary on stdout; on stderr when ghz writes another format there (-O json without -o).
split_to=1
caller_sets O format && ! caller_sets o output && split_to=2
if [[ $counted == 1 ]]; then node dist/test/load/ghz-answers.js report "$metrics" "$before" >&"$split_to" || true; fi
exit $status
