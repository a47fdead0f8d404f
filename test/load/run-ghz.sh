#!/usr/bin/env bash
# Load test of ShouldRateLimit with ghz, started by `make ghz` (which builds first).
#
# Starts the built server (memory store, limits from examples/) on free local ports, runs ghz with
# test/load/ghz.json aimed at it, then stops the server.
#   make ghz GHZ_DURATION=60s GHZ_CONCURRENCY=100     # override ghz.json's duration/concurrency/connections
#   bash test/load/run-ghz.sh -O html -o report.html   # extra arguments go to ghz
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
  echo "ghz not found: install ghz: go install github.com/bojand/ghz/cmd/ghz@latest or download a release from https://github.com/bojand/ghz/releases" >&2
  exit 127
fi

if [[ ! -f dist/src/main.js ]] || { [[ $smoke == 1 ]] && [[ ! -f dist/test/load/ghz-data.js ]]; }; then
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

GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port HOST=127.0.0.1 PORT=$http_port DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_port \
  CONFIG_PATH="${CONFIG_PATH:-examples}" BACKEND_TYPE="${BACKEND_TYPE:-memory}" LOG_LEVEL="${LOG_LEVEL:-warn}" \
  node dist/src/main.js >"$log" 2>&1 &
server=$!

stop_server() {
  if kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -f "$config" "$log"
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
node -e '
  const c = JSON.parse(require("node:fs").readFileSync("test/load/ghz.json", "utf8"));
  c.host = process.argv[1];
  // Overrides from the environment: ghz does not let flags override a config file.
  const env = process.env;
  if (env.GHZ_DURATION) c.duration = env.GHZ_DURATION;
  if (env.GHZ_CONCURRENCY) c.concurrency = Number(env.GHZ_CONCURRENCY);
  if (env.GHZ_CONNECTIONS) c.connections = Number(env.GHZ_CONNECTIONS);
  process.stdout.write(JSON.stringify(c, null, 2));
' "127.0.0.1:$grpc_port" >"$config"

echo "slidegate on 127.0.0.1:$grpc_port (HTTP $http_port), config ${CONFIG_PATH:-examples}, store ${BACKEND_TYPE:-memory}" >&2
if [[ $smoke == 1 ]]; then
  node dist/test/load/ghz-data.js "127.0.0.1:$grpc_port" "$config"
else
  ghz --config "$config" "$@"
fi
