import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from '../log';
import { LOADER_OPTIONS } from '../wire/grpc-definitions';
import { SettingsError, type XdsSettings } from '../settings/settings';
import type { AnyResource } from './rate-limit-config';

/**
 * A state-of-the-world xDS client for one resource type over the aggregated discovery service
 * (envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources).
 *
 * The protocol as this client speaks it: the first request of a stream carries the node, the type
 * URL, no resource names (every resource of the type) and the version last applied; each response
 * is the complete set of resources, handed to `onResources`; it is ACKed (its version and nonce) when
 * applied, NACKed (the version still applied, its nonce, an error_detail) when rejected. When the
 * stream ends or fails, the next one opens after a backoff; until the channel connects, grpc-js
 * dials again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL. Nothing here stops decisions:
 * the last applied resources stay in force while the control plane is away.
 */

export const ADS_PROTO = 'envoy/service/discovery/v3/ads.proto';
const ADS_SERVICE = 'envoy.service.discovery.v3.AggregatedDiscoveryService';

/** google.rpc.Code of a NACK: the resources were read and rejected. */
const INVALID_ARGUMENT = 3;

/** A DiscoveryResponse as proto-loader decodes it (its google.protobuf.Any keeps the snake_case name). */
interface DiscoveryResponse {
  versionInfo: string;
  resources: { type_url: string; value: Buffer }[];
  typeUrl: string;
  nonce: string;
}

interface DiscoveryRequest {
  versionInfo: string;
  node: { id: string; metadata: { fields: Record<string, { stringValue: string }> }; userAgentName: string };
  resourceNames: string[];
  typeUrl: string;
  responseNonce: string;
  errorDetail?: { code: number; message: string };
}

type AdsStream = grpc.ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;

/** The wait before stream number `attempt` + 1 (0-based): initial, doubling up to max, then randomised by ±randomFactor when jitter is on. */
export function backoffDelayMs(attempt: number, backoff: XdsSettings['backoff'], random: () => number = Math.random): number {
  const base = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(attempt, 30));
  if (!backoff.jitter) return base;
  return Math.round(Math.min(backoff.maxMs, base * (1 + backoff.randomFactor * (2 * random() - 1))));
}

export interface AdsClientOptions {
  readonly settings: XdsSettings;
  readonly typeUrl: string;
  /**
   * A response's resources: apply them and return undefined (ACK), or return why they are rejected
   * (NACK; the previous resources must stay in force).
   */
  readonly onResources: (resources: readonly AnyResource[], version: string) => string | undefined;
  readonly logger: Logger;
}

let adsDefinition: grpc.ServiceDefinition | undefined;

/** The grpc-js definition of the aggregated discovery service (loaded on first use). */
export function adsServiceDefinition(): grpc.ServiceDefinition {
  adsDefinition ??= protoLoader.loadSync(ADS_PROTO, LOADER_OPTIONS)[ADS_SERVICE] as grpc.ServiceDefinition;
  return adsDefinition;
}

/** TLS to the control plane from the CONFIG_GRPC_XDS_* files (read once, at start). */
function channelCredentials(tls: XdsSettings['tls']): grpc.ChannelCredentials {
  if (!tls.enabled) return grpc.credentials.createInsecure();
  const read = (variable: string, file: string | undefined): Buffer | null => {
    if (file === undefined) return null;
    try {
      return fs.readFileSync(file);
    } catch (err) {
      throw new SettingsError(variable, `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
  };
  return grpc.credentials.createSsl(
    read('CONFIG_GRPC_XDS_SERVER_TLS_CACERT', tls.serverCaPath),
    read('CONFIG_GRPC_XDS_CLIENT_TLS_KEY', tls.clientKeyPath),
    read('CONFIG_GRPC_XDS_CLIENT_TLS_CERT', tls.clientCertPath),
  );
}

/** One subscription to one resource type; start() connects, close() lets go of everything. */
export class AdsClient {
  private readonly client: grpc.Client & { StreamAggregatedResources(metadata: grpc.Metadata, options: grpc.CallOptions): AdsStream };
  private readonly node: DiscoveryRequest['node'];
  private stream: AdsStream | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  /** Streams that ended without delivering a response, in a row (sets the backoff). */
  private failures = 0;
  private appliedVersion = '';
  private closed = false;

  constructor(private readonly options: AdsClientOptions) {
    const { settings } = options;
    // No keepalive pings: Go gRPC servers (go-control-plane's among them) answer pings more often
    // than every 5 minutes with GOAWAY; a control plane that goes away closes its connections anyway.
    const channelOptions: grpc.ChannelOptions = {
      'grpc.initial_reconnect_backoff_ms': settings.connectRetryIntervalMs,
      'grpc.max_reconnect_backoff_ms': settings.connectRetryIntervalMs,
      ...(settings.maxMessageBytes === undefined ? {} : { 'grpc.max_receive_message_length': settings.maxMessageBytes }),
      ...(settings.tls.enabled && settings.tls.serverSan !== undefined ? { 'grpc.ssl_target_name_override': settings.tls.serverSan } : {}),
    };
    const Client = grpc.makeClientConstructor(adsServiceDefinition(), ADS_SERVICE);
    this.client = new Client(settings.serverUrl, channelCredentials(settings.tls), channelOptions) as unknown as AdsClient['client'];
    const fields: Record<string, { stringValue: string }> = {};
    for (const [k, v] of Object.entries(settings.nodeMetadata)) fields[k] = { stringValue: v };
    this.node = { id: settings.nodeId, metadata: { fields }, userAgentName: 'slidegate' };
  }

  /** Opens the first stream. */
  start(): void {
    this.options.logger.info({ server: this.options.settings.serverUrl, node: this.node.id }, 'connecting to the xDS control plane');
    this.open();
  }

  /** Ends the stream and the channel; no timer survives it. */
  close(): void {
    this.closed = true;
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stream?.cancel();
    this.stream = undefined;
    this.client.close();
  }

  private open(): void {
    if (this.closed) return;
    // waitForReady: while the control plane is unreachable the stream waits for the channel, which
    // keeps dialling, instead of failing at once.
    const metadata = new grpc.Metadata({ waitForReady: true });
    for (const [k, v] of Object.entries(this.options.settings.additionalHeaders)) metadata.set(k, v);
    const stream = this.client.StreamAggregatedResources(metadata, {});
    this.stream = stream;
    let received = false;
    stream.on('data', (response: DiscoveryResponse) => {
      if (this.stream !== stream) return;
      if (!received) this.options.logger.info({ server: this.options.settings.serverUrl }, 'xDS stream established');
      received = true;
      this.failures = 0;
      this.onResponse(stream, response);
    });
    let ended = false;
    const end = (err?: grpc.ServiceError): void => {
      if (ended) return;
      ended = true;
      if (this.stream !== stream || this.closed) return;
      this.stream = undefined;
      if (!received) this.failures++;
      const delayMs = backoffDelayMs(this.failures, this.options.settings.backoff);
      this.options.logger.warn(
        { server: this.options.settings.serverUrl, err: err?.details ?? 'stream ended', retryInMs: delayMs },
        'xDS stream lost; the last config keeps serving',
      );
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        this.open();
      }, delayMs);
      this.retryTimer.unref();
    };
    stream.on('error', end);
    stream.on('end', () => {
      stream.end();
      end();
    });
    stream.on('status', (status: grpc.StatusObject) => {
      if (status.code !== grpc.status.OK) end(status as grpc.ServiceError);
    });
    this.send(stream, { versionInfo: this.appliedVersion, responseNonce: '' });
  }

  private onResponse(stream: AdsStream, response: DiscoveryResponse): void {
    const { typeUrl } = this.options;
    // ADS may multiplex other types; this client subscribed to one and has nothing to say on others.
    if (response.typeUrl !== typeUrl) return;
    let rejection: string | undefined;
    try {
      const resources = response.resources.map((r) => ({ typeUrl: r.type_url, value: r.value }));
      rejection = this.options.onResources(resources, response.versionInfo);
    } catch (err) {
      rejection = err instanceof Error ? err.message : String(err);
    }
    if (rejection === undefined) {
      this.appliedVersion = response.versionInfo;
      this.send(stream, { versionInfo: response.versionInfo, responseNonce: response.nonce });
    } else {
      this.send(stream, {
        versionInfo: this.appliedVersion,
        responseNonce: response.nonce,
        errorDetail: { code: INVALID_ARGUMENT, message: rejection },
      });
    }
  }

  private send(stream: AdsStream, request: Pick<DiscoveryRequest, 'versionInfo' | 'responseNonce' | 'errorDetail'>): void {
    stream.write({ ...request, node: this.node, resourceNames: [], typeUrl: this.options.typeUrl });
  }
}
