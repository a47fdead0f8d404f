import * as grpc from '@grpc/grpc-js';
import { adsServiceDefinition } from '../../src/xds/ads-client';
import { encodeRateLimitConfig, RATE_LIMIT_CONFIG_TYPE_URL } from '../../src/xds/rate-limit-config';

/**
 * A state-of-the-world ADS control plane for tests, speaking the discovery protocol as
 * go-control-plane's snapshot cache does: one snapshot (version + RateLimitConfig resources) per
 * node id; a stream is answered only when its node id has a snapshot; a response carries every
 * resource and a fresh nonce; a request whose nonce is not the last one sent is stale and ignored;
 * a snapshot is sent again only when its version differs from what the stream last ACKed or was sent.
 * Every request is recorded, so tests can check node ids, ACKs and NACKs.
 */

/** A RateLimitConfig in protobufjs's camelCase form: {name, domain, descriptors: [{key, value, rateLimit: {unit: 'SECOND', requestsPerUnit}}]}. */
export type RateLimitConfigMessage = Record<string, unknown>;

export interface RecordedRequest {
  readonly nodeId: string;
  readonly versionInfo: string;
  readonly responseNonce: string;
  readonly typeUrl: string;
  readonly resourceNames: readonly string[];
  readonly errorDetail?: { readonly code: number; readonly message: string };
  /** gRPC metadata of the stream the request came on. */
  readonly metadata: Readonly<Record<string, string>>;
}

interface StreamState {
  readonly call: grpc.ServerDuplexStream<unknown, unknown>;
  nodeId: string | undefined;
  lastNonce: string | undefined;
  /** The version last sent on this stream. */
  sentVersion: string | undefined;
}

export interface AdsServerOptions {
  /** Server TLS: key pair, and the CA client certificates must chain to (requires a client certificate). */
  readonly tls?: { readonly cert: Buffer; readonly key: Buffer; readonly clientCa: Buffer };
  /** Listen on this port (0: any); a restarted control plane reuses its port. */
  readonly port?: number;
}

export class TestAdsServer {
  readonly requests: RecordedRequest[] = [];
  private server: grpc.Server | undefined;
  private readonly streams = new Set<StreamState>();
  private readonly snapshots = new Map<string, { version: string; resources: { type_url: string; value: Buffer }[] }>();
  private nonce = 0;
  private boundPort = 0;

  constructor(private readonly options: AdsServerOptions = {}) {}

  get port(): number {
    return this.boundPort;
  }

  /** Binds 127.0.0.1 (the port given, or a free one); resolves to the port. */
  async start(): Promise<number> {
    const service = adsServiceDefinition();
    const server = new grpc.Server();
    server.addService(service, { streamAggregatedResources: (call: grpc.ServerDuplexStream<unknown, unknown>) => this.onStream(call) });
    const tls = this.options.tls;
    const credentials = tls
      ? grpc.ServerCredentials.createSsl(tls.clientCa, [{ cert_chain: tls.cert, private_key: tls.key }], true)
      : grpc.ServerCredentials.createInsecure();
    this.boundPort = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`127.0.0.1:${this.options.port ?? this.boundPort}`, credentials, (err, port) => (err ? reject(err) : resolve(port))),
    );
    this.server = server;
    return this.boundPort;
  }

  /** Cuts every stream and stops listening (a control plane going away). start() again to come back on the same port. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    this.streams.clear();
    // As a crash or a pod deletion: every connection cut at once.
    server?.forceShutdown();
    await new Promise((r) => setImmediate(r));
  }

  /** Sets the snapshot of `nodeId` and pushes it to that node's open streams. */
  setSnapshot(nodeId: string, version: string, configs: readonly RateLimitConfigMessage[]): void {
    // proto-loader keeps google.protobuf.Any's field names as they are (type_url).
    const resources = configs.map((c) => ({ type_url: RATE_LIMIT_CONFIG_TYPE_URL, value: Buffer.from(encodeRateLimitConfig(c)) }));
    this.snapshots.set(nodeId, { version, resources });
    for (const s of this.streams) if (s.nodeId === nodeId) this.push(s);
  }

  /** Number of streams currently open. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Requests that ACK `version` (no error_detail). */
  acks(version: string): RecordedRequest[] {
    return this.requests.filter((r) => r.errorDetail === undefined && r.versionInfo === version && r.responseNonce !== '');
  }

  /** Requests carrying an error_detail. */
  nacks(): RecordedRequest[] {
    return this.requests.filter((r) => r.errorDetail !== undefined);
  }

  private onStream(call: grpc.ServerDuplexStream<unknown, unknown>): void {
    const state: StreamState = { call, nodeId: undefined, lastNonce: undefined, sentVersion: undefined };
    this.streams.add(state);
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(call.metadata.getMap())) metadata[k] = String(v);
    call.on('data', (raw: unknown) => {
      const req = raw as {
        versionInfo: string;
        node: { id: string } | null;
        responseNonce: string;
        typeUrl: string;
        resourceNames: string[];
        errorDetail: { code: number; message: string } | null;
      };
      if (req.node?.id) state.nodeId = req.node.id;
      this.requests.push({
        nodeId: req.node?.id ?? '',
        versionInfo: req.versionInfo,
        responseNonce: req.responseNonce,
        typeUrl: req.typeUrl,
        resourceNames: req.resourceNames,
        errorDetail: req.errorDetail ?? undefined,
        metadata,
      });
      if (req.typeUrl !== RATE_LIMIT_CONFIG_TYPE_URL) return;
      // A request answering an older response is stale: the client will answer the newer one too.
      if (req.responseNonce !== '' && req.responseNonce !== state.lastNonce) return;
      if (req.responseNonce === '') state.sentVersion = req.versionInfo === '' ? undefined : req.versionInfo;
      this.push(state);
    });
    const forget = (): void => {
      this.streams.delete(state);
    };
    call.on('end', () => {
      forget();
      call.end();
    });
    call.on('error', forget);
    call.on('cancelled', forget);
  }

  private push(state: StreamState): void {
    const snapshot = state.nodeId === undefined ? undefined : this.snapshots.get(state.nodeId);
    if (snapshot === undefined || snapshot.version === state.sentVersion) return;
    const nonce = String(++this.nonce);
    state.lastNonce = nonce;
    state.sentVersion = snapshot.version;
    state.call.write({ versionInfo: snapshot.version, resources: snapshot.resources, typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, nonce });
  }
}
