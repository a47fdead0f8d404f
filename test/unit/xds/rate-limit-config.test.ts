import { parseConfigText } from '../../../src/config/rule-reader';
import { loadSettings, SettingsError } from '../../../src/settings/settings';
import { backoffDelayMs } from '../../../src/xds/ads-client';
import { RULE_SETTINGS, type RuleSetting } from '../../../src/limiter/rules';
import { loadProtoFiles } from '../../../src/wire/proto';
import {
  configFromResources,
  encodeRateLimitConfig,
  RATE_LIMIT_CONFIG_PROTO,
  RATE_LIMIT_CONFIG_TYPE_URL,
  type AnyResource,
} from '../../../src/xds/rate-limit-config';

/**
 * xDS resources are validated by the file loader: a RateLimitConfig message yields the same rule
 * tree as the YAML file that says the same, and the same errors, naming the resource. Plus the xDS
 * settings as the reference reads them, and the reconnect backoff.
 */

const OPTS = { defaultAlgorithm: 'sliding_window' } as const;

const resource = (message: Record<string, unknown>): AnyResource => ({ typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value: encodeRateLimitConfig(message) });

describe('RateLimitConfig resources', () => {
  test('give the same rule tree as the config file that says the same', () => {
    const fromXds = configFromResources(
      [
        resource({
          name: 'edge',
          domain: 'edge',
          descriptors: [
            {
              key: 'tenant',
              value: 'acme',
              shadowMode: true,
              descriptors: [{ key: 'path', rateLimit: { unit: 'HOUR', requestsPerUnit: 1000, name: 'acme_path' } }],
            },
            { key: 'health', rateLimit: { unlimited: true } },
            { key: 'api_key', detailedMetric: true, rateLimit: { unit: 'SECOND', requestsPerUnit: 5, replaces: [{ name: 'acme_path' }] } },
          ],
        }),
      ],
      OPTS,
    );
    const fromFile = parseConfigText(
      'RateLimitConfig "edge"',
      `
domain: edge
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000, name: acme_path}
  - key: health
    rate_limit: {unlimited: true}
  - key: api_key
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: acme_path}]}
`,
      OPTS,
    );
    expect(fromXds.domains.get('edge')).toEqual(fromFile);
  });

  test('are rejected as a file would be, the error naming the resource and the path', () => {
    const noUnit = resource({ name: 'r1', domain: 'edge', descriptors: [{ key: 'a', descriptors: [{ key: 'b', rateLimit: { requestsPerUnit: 3 } }] }] });
    expect(() => configFromResources([noUnit], OPTS)).toThrow(
      'RateLimitConfig "r1": descriptors[0].descriptors[0].rate_limit.unit: required (or unlimited: true)',
    );
    const emptyKey = resource({ name: 'r2', domain: 'edge', descriptors: [{ rateLimit: { unit: 'SECOND', requestsPerUnit: 1 } }] });
    expect(() => configFromResources([emptyKey], OPTS)).toThrow('RateLimitConfig "r2": descriptors[0].key: must not be empty');
    const unitWithUnlimited = resource({ name: 'r3', domain: 'edge', descriptors: [{ key: 'a', rateLimit: { unit: 'SECOND', unlimited: true } }] });
    expect(() => configFromResources([unitWithUnlimited], OPTS)).toThrow(
      'RateLimitConfig "r3": descriptors[0].rate_limit.unit: not allowed with unlimited: true',
    );
    const twice = [resource({ name: 'a', domain: 'edge' }), resource({ name: 'b', domain: 'edge' })];
    expect(() => configFromResources(twice, OPTS)).toThrow('RateLimitConfig "b": domain: duplicate domain "edge"');
    expect(() => configFromResources([{ typeUrl: 'type.googleapis.com/other', value: new Uint8Array() }], OPTS)).toThrow('resources[0]: unexpected type');
    expect(() => configFromResources([{ typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value: Uint8Array.of(0x0a, 0x05) }], OPTS)).toThrow('resources[0]: cannot decode');
  });

  test('carry every per-rule setting of the core table that the proto has, as the file key does', () => {
    const descriptor = loadProtoFiles([RATE_LIMIT_CONFIG_PROTO]).lookupType('ratelimit.config.ratelimit.v3.RateLimitDescriptor');
    // protobufjs's name for a proto field: camelCase.
    const fieldOf = (yaml: string) => descriptor.fields[yaml.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
    const carried = (Object.values(RULE_SETTINGS) as RuleSetting[]).filter((s) => fieldOf(s.yaml) !== undefined);
    expect(carried.map((s) => s.yaml)).toEqual(
      expect.arrayContaining(['shadow_mode', 'quota_mode', 'detailed_metric', 'reservations', 'reservation_hold_seconds']),
    );
    const limit = 'rate_limit: {unit: second, requests_per_unit: 5}';
    const plain = parseConfigText('RateLimitConfig "r"', `domain: d\ndescriptors:\n  - key: a\n    ${limit}\n`, OPTS);
    for (const s of carried) {
      const set = s.type === 'boolean' ? !s.default : s.max;
      // A hold time goes only with reservations.
      const needs = s.yaml === 'reservation_hold_seconds' ? { reservations: true } : {};
      const rule = { key: 'a', ...needs, [fieldOf(s.yaml).name]: set, rateLimit: { unit: 'SECOND', requestsPerUnit: 5 } };
      const fromXds = configFromResources([resource({ name: 'r', domain: 'd', descriptors: [rule] })], OPTS);
      const also = Object.keys(needs)
        .map((k) => `    ${k}: true\n`)
        .join('');
      const fromFile = parseConfigText('RateLimitConfig "r"', `domain: d\ndescriptors:\n  - key: a\n${also}    ${s.yaml}: ${set}\n    ${limit}\n`, OPTS);
      expect(fromFile).not.toEqual(plain);
      expect(fromXds.domains.get('d')).toEqual(fromFile);
    }
  });

  test('no resources: a config with no domains', () => {
    expect(configFromResources([], OPTS).domains.size).toBe(0);
  });
});

describe('xDS settings', () => {
  test('the reference defaults', () => {
    const s = loadSettings({});
    expect(s.configType).toBe('FILE');
    expect(s.forceStartWithoutInitialConfig).toBe(false);
    expect(s.xds).toEqual({
      nodeId: 'default',
      nodeMetadata: {},
      serverUrl: 'localhost:18000',
      connectRetryIntervalMs: 3_000,
      additionalHeaders: {},
      tls: { enabled: false, clientCertPath: undefined, clientKeyPath: undefined, serverCaPath: undefined, serverSan: undefined },
      backoff: { initialMs: 10_000, maxMs: 60_000, randomFactor: 0.5, jitter: true },
      maxMessageBytes: undefined,
    });
  });

  test('Go durations, key=value metadata and key:value headers', () => {
    const s = loadSettings({
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: '1m30s',
      XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '250ms',
      XDS_CLIENT_BACKOFF_MAX_INTERVAL: '1.5s',
      CONFIG_GRPC_XDS_NODE_METADATA: 'zone=a,ignored,team=rl=x',
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'x-a:1,x-b:two:parts',
      XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: '1048576',
    });
    expect(s.configType).toBe('GRPC_XDS_SOTW');
    expect(s.xds.connectRetryIntervalMs).toBe(90_000);
    expect(s.xds.backoff).toMatchObject({ initialMs: 250, maxMs: 1_500 });
    expect(s.xds.nodeMetadata).toEqual({ zone: 'a', team: 'rl=x' });
    expect(s.xds.additionalHeaders).toEqual({ 'x-a': '1', 'x-b': 'two:parts' });
    expect(s.xds.maxMessageBytes).toBe(1_048_576);
  });

  test.each([
    ['CONFIG_TYPE', 'grpc_xds_sotw'],
    ['CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', '3'],
    ['XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', '10 s'],
    ['CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS', 'x-a'],
    ['XDS_CLIENT_BACKOFF_RANDOM_FACTOR', '2'],
    ['TRACING_EXPORTER_PROTOCOL', 'zipkin'],
    ['TRACING_SAMPLING_RATE', '1.5'],
  ])('%s=%s stops the start, naming the variable', (name, value) => {
    expect(() => loadSettings({ [name]: value })).toThrow(SettingsError);
    expect(() => loadSettings({ [name]: value })).toThrow(`invalid setting ${name}:`);
  });

  test('a client certificate without its key is refused', () => {
    expect(() => loadSettings({ CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true', CONFIG_GRPC_XDS_CLIENT_TLS_CERT: '/certs/tls.crt' })).toThrow(
      'invalid setting CONFIG_GRPC_XDS_CLIENT_TLS_KEY',
    );
  });
});

describe('reconnect backoff', () => {
  const backoff = { initialMs: 100, maxMs: 1_000, randomFactor: 0.5, jitter: false };

  test('doubles from the initial interval up to the maximum', () => {
    expect([0, 1, 2, 3, 4, 10, 100].map((a) => backoffDelayMs(a, backoff))).toEqual([100, 200, 400, 800, 1_000, 1_000, 1_000]);
  });

  test('with jitter, spreads each wait by the random factor either way, never past the maximum', () => {
    const jittered = { ...backoff, jitter: true };
    expect(backoffDelayMs(1, jittered, () => 0)).toBe(100);
    expect(backoffDelayMs(1, jittered, () => 0.5)).toBe(200);
    expect(backoffDelayMs(1, jittered, () => 1)).toBe(300);
    expect(backoffDelayMs(4, jittered, () => 1)).toBe(1_000);
  });
});
