import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadSettings } from '../../src/settings/settings';
import { createRedisClient, parseRedisTarget, type RedisClient } from '../../src/store/redis/connection';
import { RedisExchange } from '../../src/store/redis/redis-exchange';
import { RedisStore, type RedisErrorKind } from '../../src/store/redis/redis-store';

/**
 * Real redis-server processes for tests: free ports on 127.0.0.1, no persistence, started and
 * awaited (PING), killed afterwards. A missing binary fails the test loudly; it never skips.
 * Sentinel runs as `redis-server --sentinel`, so only redis-server and redis-cli are needed.
 */

const HOST = '127.0.0.1';
const live = new Set<ChildProcess>();

// A jest worker that dies mid-suite must not leave servers behind.
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/** Throws a clear error when redis-server or redis-cli is missing. */
export function requireRedisBinaries(): void {
  for (const bin of ['redis-server', 'redis-cli']) {
    try {
      execFileSync(bin, ['--version'], { stdio: 'ignore' });
    } catch {
      throw new Error(`${bin} is not installed: the Redis tests need it (make tools installs it, or apt-get install redis-server)`);
    }
  }
}

/** A port that is free now (and, with `bus`, whose cluster bus port +10000 is free too). */
export async function freePort(options: { bus?: boolean } = {}): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await listenOnce(0);
    if (options.bus !== true) return port;
    if (port + 10_000 <= 65_535 && (await isFree(port + 10_000))) return port;
  }
  throw new Error('no free port found');
}

function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(port, HOST, () => {
      const p = (srv.address() as { port: number }).port;
      srv.close(() => resolve(p));
    });
  });
}

async function isFree(port: number): Promise<boolean> {
  try {
    await listenOnce(port);
    return true;
  } catch {
    return false;
  }
}

/** Sends one inline command over a fresh socket; resolves with the raw reply (or rejects on timeout). */
export function rawCommand(port: number, command: string, timeoutMs = 500): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = new Socket();
    let data = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no reply from ${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    sock.connect(port, HOST, () => sock.write(`${command}\r\n`));
    sock.on('data', (chunk) => {
      data += chunk.toString();
      if (data.endsWith('\r\n')) {
        clearTimeout(timer);
        sock.destroy();
        resolve(data);
      }
    });
  });
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Runs redis-cli against a port; resolves with its stdout. */
export function redisCli(port: number, ...args: string[]): string {
  return execFileSync('redis-cli', ['-h', HOST, '-p', String(port), ...args], { encoding: 'utf8' });
}

/** One redis-server process (a plain server, a cluster node or a sentinel). */
export class RedisProcess {
  private proc: ChildProcess | undefined;
  private log = '';

  constructor(
    readonly port: number,
    private readonly args: readonly string[],
    private readonly dir: string,
  ) {}

  /** `host:port`. */
  get address(): string {
    return `${HOST}:${this.port}`;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  /** Starts the process and waits until it answers PING. */
  async start(): Promise<void> {
    const proc = spawn('redis-server', [...this.args], { cwd: this.dir, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    live.add(proc);
    const keep = (chunk: Buffer): void => {
      this.log = (this.log + chunk.toString()).slice(-4_000);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    let exited = false;
    proc.once('exit', () => {
      exited = true;
      live.delete(proc);
    });
    await waitFor(
      `redis-server on port ${this.port} to answer PING`,
      async () => {
        if (exited) throw new Error(`redis-server exited:\n${this.log}`);
        return (await rawCommand(this.port, 'PING')).startsWith('+PONG');
      },
      10_000,
    );
  }

  /** Kills the process (SIGKILL: no goodbye to clients) and waits for it to be gone. */
  async kill(): Promise<void> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGCONT');
    proc.kill('SIGKILL');
    await gone;
  }

  /** Freezes the process: connections stay open but nothing answers. */
  pause(): void {
    this.proc?.kill('SIGSTOP');
  }

  resume(): void {
    this.proc?.kill('SIGCONT');
  }

  /** Runs one command through redis-cli. */
  cli(...args: string[]): string {
    return redisCli(this.port, ...args);
  }
}

function tempDir(label: string): string {
  return mkdtempSync(join(tmpdir(), `slidegate-${label}-`));
}

/** The hash slots of a Redis Cluster. */
const SLOTS = 16_384;

const BASE_ARGS = ['--bind', HOST, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'];

/** A single Redis. */
export interface RedisServer {
  readonly server: RedisProcess;
  /** `127.0.0.1:port`, the REDIS_URL of a single Redis. */
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/** Starts one redis-server on a free port (or on `options.port`: a server a client already dials). */
export async function startRedis(extraArgs: readonly string[] = [], options: { readonly port?: number } = {}): Promise<RedisServer> {
  requireRedisBinaries();
  const port = options.port ?? (await freePort());
  const dir = tempDir('redis');
  const server = new RedisProcess(port, ['--port', String(port), ...BASE_ARGS, '--dir', dir, ...extraArgs], dir);
  await server.start();
  return {
    server,
    port,
    url: server.address,
    stop: async () => {
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One master, one replica, `sentinels` sentinels watching `masterName`. */
export interface SentinelSetup {
  readonly masterName: string;
  readonly master: RedisProcess;
  readonly replica: RedisProcess;
  readonly sentinels: readonly RedisProcess[];
  /** REDIS_URL of the sentinel form: `mastername,host:port,...`. */
  readonly url: string;
  /** The address the sentinels currently report as master. */
  currentMaster(): string;
  stop(): Promise<void>;
}

/** Starts a master, a synced replica, then sentinels with a short down-after-milliseconds. */
export async function startSentinel(options: { sentinels?: number; downAfterMs?: number; masterName?: string } = {}): Promise<SentinelSetup> {
  requireRedisBinaries();
  const masterName = options.masterName ?? 'slidegate-master';
  const dir = tempDir('sentinel');
  const masterPort = await freePort();
  // The master sends its snapshot to the replica at once: by default (diskless sync) it waits 5 s
  // for more replicas to arrive first, the whole of a Sentinel setup's start-up time.
  const master = new RedisProcess(masterPort, ['--port', String(masterPort), ...BASE_ARGS, '--dir', dir, '--repl-diskless-sync-delay', '0'], dir);
  await master.start();
  const replicaPort = await freePort();
  const replica = new RedisProcess(replicaPort, ['--port', String(replicaPort), ...BASE_ARGS, '--dir', dir, '--replicaof', HOST, String(masterPort)], dir);
  await replica.start();
  await waitFor('the replica to sync', async () => replica.cli('INFO', 'replication').includes('master_link_status:up'), 10_000);

  const sentinels: RedisProcess[] = [];
  const count = options.sentinels ?? 1;
  const quorum = Math.floor(count / 2) + 1;
  for (let i = 0; i < count; i++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      conf,
      [
        `port ${port}`,
        `bind ${HOST}`,
        'protected-mode no',
        `dir ${dir}`,
        `sentinel monitor ${masterName} ${HOST} ${masterPort} ${quorum}`,
        `sentinel down-after-milliseconds ${masterName} ${options.downAfterMs ?? 400}`,
        `sentinel failover-timeout ${masterName} 2000`,
        `sentinel parallel-syncs ${masterName} 1`,
        '',
      ].join('\n'),
    );
    const s = new RedisProcess(port, [conf, '--sentinel'], dir);
    await s.start();
    sentinels.push(s);
  }
  // A sentinel learns of replicas from the master's INFO: wait until every one knows it.
  await waitFor(
    'the sentinels to discover the replica',
    async () => sentinels.every((s) => s.cli('SENTINEL', 'replicas', masterName).includes(String(replicaPort))),
    15_000,
    100,
  );
  return {
    masterName,
    master,
    replica,
    sentinels,
    url: [masterName, ...sentinels.map((s) => s.address)].join(','),
    currentMaster: () => sentinels[0].cli('SENTINEL', 'get-master-addr-by-name', masterName).trim().split('\n').join(':'),
    stop: async () => {
      await Promise.all([...sentinels, replica, master].map((p) => p.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Redis Cluster of `masters` masters (no replicas) sharing the 16384 slots. */
export interface RedisClusterSetup {
  readonly nodes: readonly RedisProcess[];
  /** REDIS_URL of the cluster form: `host:port,host:port,...`. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * Starts cluster-enabled nodes, gives each an even share of the slots (as `redis-cli --cluster create`
 * would, without its one-second polls), joins them with CLUSTER MEET and waits until every node
 * knows every other and reports cluster_state:ok.
 */
export async function startCluster(options: { masters?: number; nodeTimeoutMs?: number } = {}): Promise<RedisClusterSetup> {
  requireRedisBinaries();
  const dir = tempDir('cluster');
  const nodes: RedisProcess[] = [];
  const masters = options.masters ?? 3;
  for (let i = 0; i < masters; i++) {
    const port = await freePort({ bus: true });
    nodes.push(
      new RedisProcess(
        port,
        [
          '--port',
          String(port),
          ...BASE_ARGS,
          '--dir',
          dir,
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          `nodes-${port}.conf`,
          '--cluster-node-timeout',
          String(options.nodeTimeoutMs ?? 1_000),
        ],
        dir,
      ),
    );
  }
  await Promise.all(nodes.map((n) => n.start()));
  nodes.forEach((node, i) => {
    const first = Math.floor((i * SLOTS) / masters);
    const next = Math.floor(((i + 1) * SLOTS) / masters);
    node.cli('CLUSTER', 'ADDSLOTS', ...Array.from({ length: next - first }, (_, s) => String(first + s)));
    // Distinct epochs before the nodes meet, as redis-cli sets them: no collision to settle.
    node.cli('CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1));
  });
  for (const node of nodes.slice(1)) node.cli('CLUSTER', 'MEET', HOST, String(nodes[0].port));
  await waitFor(
    'cluster_state:ok on every node',
    async () =>
      nodes.every((n) => {
        const info = n.cli('CLUSTER', 'INFO');
        return info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${masters}`);
      }),
    20_000,
    50,
  );
  return {
    nodes,
    url: nodes.map((n) => n.address).join(','),
    stop: async () => {
      await Promise.all(nodes.map((n) => n.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Options of a RedisStore connected to a test Redis. */
export interface TestStoreOptions {
  readonly type: 'single' | 'sentinel' | 'cluster';
  readonly url: string;
  /** Generous by default: contract cases test behaviour, the fault cases pass their own. */
  readonly timeoutMs?: number;
  readonly keyPrefix?: string;
  readonly onError?: (kind: RedisErrorKind) => void;
  /** RESERVATION_TTL, ms (the store's default when omitted). */
  readonly reservationTtlMs?: number;
  /** RESERVATIONS_MAX_PER_KEY (the store's default when omitted). */
  readonly reservationsPerKey?: number;
  /** RESERVATIONS_MAX_KEY_BYTES (the store's default when omitted). */
  readonly reservationKeyBytes?: number;
}

/** A RedisStore on its own client, resolved once the client is ready. */
export async function connectStore(options: TestStoreOptions): Promise<RedisStore> {
  return (await connectBackend(options)).store;
}

/** A RedisStore and the RedisExchange on its connection, connected. */
export async function connectBackend(options: TestStoreOptions): Promise<{ store: RedisStore; exchange: RedisExchange }> {
  const settings = loadSettings({ BACKEND_TYPE: 'redis', REDIS_TYPE: options.type, REDIS_URL: options.url });
  const client = createRedisClient(parseRedisTarget(settings.redis));
  const keyPrefix = options.keyPrefix ?? 'test:';
  const timeoutMs = options.timeoutMs ?? 2_000;
  const exchange = new RedisExchange({ client, keyPrefix, timeoutMs });
  const store = new RedisStore({
    client,
    timeoutMs,
    keyPrefix,
    onError: options.onError,
    reservationTtlMs: options.reservationTtlMs,
    reservationsPerKey: options.reservationsPerKey,
    reservationKeyBytes: options.reservationKeyBytes,
  });
  await waitFor('the store to connect', async () => store.isHealthy(), 10_000, 20);
  return { store, exchange };
}

/** A client of a test Redis deployment, resolved once it is ready. */
export async function connectedClient(type: TestStoreOptions['type'], url: string): Promise<RedisClient> {
  const settings = loadSettings({ BACKEND_TYPE: 'redis', REDIS_TYPE: type, REDIS_URL: url });
  const client = createRedisClient(parseRedisTarget(settings.redis));
  await waitFor('the client to connect', async () => client.status === 'ready', 10_000, 20);
  return client;
}

/** Waits until `check` holds (polling), or fails naming `what`. */
export const waitUntil = waitFor;
