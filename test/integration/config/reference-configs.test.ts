import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log';
import { descriptor, type RlsClient, type RlsRequestInput } from '../../helpers/grpc-client';
import { startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';
import { plainStruct } from '../../helpers/struct';

/**
 * Configs and layouts written for the reference server, served unchanged by the real service over
 * gRPC with a real Redis: ConfigMap keys of any name and subfolders (with the ..data swap),
 * share_threshold, quota_mode / QUOTA_MODE with RESPONSE_DYNAMIC_METADATA on both transports,
 * MERGE_DOMAIN_CONFIG and HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED. Windows are an hour long, so no
 * expectation depends on where a window starts.
 */

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

/**
 * A service on the test's Redis; every call's keys are fresh thanks to a per-test domain or value.
 * A generous store deadline: these tests are about answers, not latency, on a loaded machine.
 */
function startOnRedis(options: Parameters<typeof startTestService>[0] = {}): Promise<TestService> {
  return startTestService({ ...options, env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, WORKERS: '1', STORE_TIMEOUT_MS: '5000', ...options.env } });
}

function logCapture(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { lines, logger: createLogger({ level: 'warn', format: 'json', destination }) };
}

const ask = (domain: string, ...descriptors: [string, string][][]): RlsRequestInput => ({
  domain,
  descriptors: descriptors.map((pairs) => descriptor(pairs)),
});

async function codes(client: RlsClient, request: RlsRequestInput): Promise<string[]> {
  const reply = await client.shouldRateLimit(request);
  return [reply.overallCode, ...reply.statuses.map((s) => s.code)];
}

async function eventually<T>(probe: () => Promise<T>, ok: (v: T) => boolean, deadlineMs = 6_000): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const v = await probe();
    if (ok(v) || Date.now() >= until) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('the files the reference reads', () => {
  it('serves a ConfigMap key named without an extension and a subfolder, and follows the ..data swap', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-cm-'));
    const mount = path.join(root, 'ratelimit', 'config');
    fs.mkdirSync(mount, { recursive: true });
    const rules = (perHour: number): string => `domain: cm\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: ${perHour}}\n`;
    const publish = (version: string, yaml: string): void => {
      const dir = path.join(mount, `..${version}`);
      fs.mkdirSync(dir);
      fs.writeFileSync(path.join(dir, 'ratelimit'), yaml);
      fs.symlinkSync(`..${version}`, path.join(mount, '..data_tmp'));
      fs.renameSync(path.join(mount, '..data_tmp'), path.join(mount, '..data'));
    };
    publish('2026_01', rules(2));
    fs.symlinkSync('..data/ratelimit', path.join(mount, 'ratelimit'));
    fs.mkdirSync(path.join(mount, 'teams'));
    fs.writeFileSync(
      path.join(mount, 'teams', 'payments.conf'),
      'domain: payments\ndescriptors:\n  - key: card\n    rate_limit: {unit: hour, requests_per_unit: 1}\n',
    );
    const svc = await startOnRedis({
      env: { CONFIG_PATH: '', RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit', RUNTIME_WATCH_ROOT: 'false' },
    });
    try {
      expect(await codes(svc.client, ask('cm', [['user', 'u1']]))).toEqual(['OK', 'OK']);
      expect(await codes(svc.client, ask('cm', [['user', 'u1']]))).toEqual(['OK', 'OK']);
      expect(await codes(svc.client, ask('cm', [['user', 'u1']]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      expect(await codes(svc.client, ask('payments', [['card', 'c1']]))).toEqual(['OK', 'OK']);
      expect(await codes(svc.client, ask('payments', [['card', 'c1']]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      publish('2026_02', rules(7));
      const limit = await eventually(
        async () => (await svc.client.shouldRateLimit(ask('cm', [['user', `probe-${Date.now()}`]]))).statuses[0].currentLimit?.requestsPerUnit,
        (v) => v === 7,
      );
      expect(limit).toBe(7);
    } finally {
      await svc.stop();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  it('warns at every load that a directory without a rule allows every request', async () => {
    const { lines, logger } = logCapture();
    const svc = await startOnRedis({ config: { 'notes.yaml': 'domain: quiet\n' }, logger });
    try {
      expect(lines.join('')).toContain('no rule in');
      expect(lines.join('')).toContain('every request is allowed');
      const before = lines.length;
      svc.writeConfig('notes.yaml', 'domain: quiet\ndescriptors: []\n');
      await eventually(
        async () => lines.length,
        (n) => n > before,
      );
      expect(lines.slice(before).join('')).toContain('every request is allowed');
    } finally {
      await svc.stop();
    }
  });

  it('loads a key the reference ignores, logging a warning that names file and path', async () => {
    const { lines, logger } = logCapture();
    const svc = await startOnRedis({
      config: { 'lax.yaml': 'domain: lax\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n      shadow_mode: true\n' },
      logger,
    });
    try {
      expect(lines.join('')).toContain('lax.yaml: descriptors[0].rate_limit.shadow_mode: ignored');
      expect(await codes(svc.client, ask('lax', [['k', 'v']]))).toEqual(['OK', 'OK']);
      expect(await codes(svc.client, ask('lax', [['k', 'v']]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    } finally {
      await svc.stop();
    }
  });
});

describe("the reference's integration layout and expectations (windows of an hour or more)", () => {
  let root: string;
  let svc: TestService;
  beforeAll(async () => {
    // RUNTIME_ROOT/ratelimit/config/*.yaml, and a file beside config/ that the watched-root layout does not read...
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-runtime-'));
    const config = path.join(root, 'ratelimit', 'config');
    fs.mkdirSync(config, { recursive: true });
    fs.writeFileSync(path.join(config, 'basic.yaml'), 'domain: basic\ndescriptors:\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 50}\n');
    fs.writeFileSync(
      path.join(config, 'another.yaml'),
      'domain: another\ndescriptors:\n' +
        '  - key: key2\n    rate_limit: {unit: hour, requests_per_unit: 20}\n' +
        '  - key: key3\n    rate_limit: {unit: hour, requests_per_unit: 10}\n' +
        '  - key: key4\n    rate_limit: {unit: day, requests_per_unit: 20}\n',
    );
    fs.writeFileSync(
      path.join(root, 'ratelimit', 'outside.yaml'),
      'domain: outside\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 0}\n',
    );
    // ...but one whose name starts with "config." is read, as the reference's watched root reads it.
    fs.writeFileSync(
      path.join(root, 'ratelimit', 'config.extra.yaml'),
      'domain: beside\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 0}\n',
    );
    svc = await startOnRedis({ env: { CONFIG_PATH: '', RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit' } });
  });
  afterAll(async () => {
    await svc?.stop();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('a file beside the config directory named config.* is read', async () => {
    expect(await codes(svc.client, ask('beside', [['k', 'v']]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('an unknown domain and a file outside the config directory limit nothing', async () => {
    for (const domain of ['foo', 'outside']) {
      const reply = await svc.client.shouldRateLimit(ask(domain, [['hello', 'world']]));
      expect(reply.overallCode).toBe('OK');
      expect(reply.statuses).toEqual([expect.objectContaining({ code: 'OK', currentLimit: null, limitRemaining: 0, durationUntilReset: null })]);
    }
  });

  it('a first hit reports the limit and what remains', async () => {
    const reply = await svc.client.shouldRateLimit(ask('basic', [['key1', 'foo']]));
    expect(reply.overallCode).toBe('OK');
    expect(reply.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { requestsPerUnit: 50, unit: 'SECOND' }, limitRemaining: 49 });
  });

  it('one key counts down to its limit, then is OVER_LIMIT', async () => {
    for (let i = 0; i < 25; i++) {
      const reply = await svc.client.shouldRateLimit(ask('another', [['key2', 'alone']]));
      expect(reply.overallCode).toBe(i < 20 ? 'OK' : 'OVER_LIMIT');
      expect(reply.statuses[0]).toMatchObject({ currentLimit: { requestsPerUnit: 20, unit: 'HOUR' }, limitRemaining: i < 20 ? 19 - i : 0 });
    }
  });

  it('two keys in one request: the smaller limit denies, and the denied request charges neither (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)', async () => {
    for (let i = 0; i < 15; i++) {
      const reply = await svc.client.shouldRateLimit(ask('another', [['key2', 'pair']], [['key3', 'pair']]));
      expect(reply.overallCode).toBe(i < 10 ? 'OK' : 'OVER_LIMIT');
      expect(reply.statuses.map((st) => st.code)).toEqual(['OK', i < 10 ? 'OK' : 'OVER_LIMIT']);
      // key2's limit_remaining in a denied request is not the reference's (see the README's Migrating section).
      if (i < 10) expect(reply.statuses.map((st) => st.limitRemaining)).toEqual([19 - i, 9 - i]);
      else expect(reply.statuses[1].limitRemaining).toBe(0);
    }
    // Nothing the denied requests carried was charged: key2 has 10 of its 20 left.
    expect((await svc.client.shouldRateLimit(ask('another', [['key2', 'pair']]))).statuses[0].limitRemaining).toBe(9);
  });

  it('duration_until_reset counts down between two hits', async () => {
    const first = await svc.client.shouldRateLimit(ask('another', [['key4', 'durTest']]));
    await new Promise((r) => setTimeout(r, 1_100));
    const second = await svc.client.shouldRateLimit(ask('another', [['key4', 'durTest']]));
    expect(second.statuses[0].durationUntilReset!.seconds).toBeLessThan(first.statuses[0].durationUntilReset!.seconds);
  });
});

describe('share_threshold on the wire', () => {
  it('values matching the pattern share one counter; without it each value has its own', async () => {
    const svc = await startOnRedis({
      config: {
        'share.yaml': `
domain: share-threshold
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
`,
      },
    });
    try {
      for (let i = 0; i < 10; i++) {
        const reply = await svc.client.shouldRateLimit(ask('share-threshold', [['files', `files/${i}.txt`]]));
        expect(reply.overallCode).toBe('OK');
        expect(reply.statuses[0].limitRemaining).toBe(9 - i);
      }
      expect(await codes(svc.client, ask('share-threshold', [['files', 'files/b.csv']]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      for (let i = 0; i < 12; i++) {
        const reply = await svc.client.shouldRateLimit(ask('share-threshold', [['files_no_share', `files_no_share/${i}`]]));
        expect(reply.overallCode).toBe('OK');
        expect(reply.statuses[0].limitRemaining).toBe(9);
      }
    } finally {
      await svc.stop();
    }
  });
});

const QUOTA = `
domain: quota
descriptors:
  - key: regular
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {policy: regular}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {policy: quota, service: {name: billing}}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`;

describe.each(['http2', 'grpc-js'])('quota_mode and dynamic metadata on the wire (GRPC_TRANSPORT=%s)', (transport) => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startOnRedis({ config: { 'quota.yaml': QUOTA }, env: { GRPC_TRANSPORT: transport, RESPONSE_DYNAMIC_METADATA: 'true' } });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('a quota rule over its limit is OVER_LIMIT in its status, and overall only when every quota rule of the request is over', async () => {
    const id = `${transport}-a`;
    expect(await codes(svc.client, ask('quota', [['quota', id]]))).toEqual(['OK', 'OK']);
    expect(await codes(svc.client, ask('quota', [['quota', id]], [['quota2', id]]))).toEqual(['OK', 'OVER_LIMIT', 'OK']);
    expect(await codes(svc.client, ask('quota', [['quota', id]], [['quota2', id]]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(await codes(svc.client, ask('quota', [['regular', id]], [['quota', `${id}-fresh`]]))).toEqual(['OK', 'OK', 'OK']);
    expect(await codes(svc.client, ask('quota', [['regular', id]], [['quota', `${id}-other`]]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
  });

  it('dynamic_metadata carries the domain, the descriptors, the hits and the metadata of the rules within their limits', async () => {
    const id = `${transport}-m`;
    const reply = await svc.client.shouldRateLimit({
      domain: 'quota',
      descriptors: [descriptor([['regular', id]]), descriptor([['quota', id]], { hitsAddend: { value: 1 } })],
      hitsAddend: 1,
    });
    expect(plainStruct(reply.dynamicMetadata)).toEqual({
      domain: 'quota',
      descriptors: [{ entries: [`regular=${id}`] }, { entries: [`quota=${id}`], hitsAddend: 1 }],
      hitsAddend: 1,
      metadata: { policy: 'regular', service: { name: 'billing' } },
    });
    // The HTTP /json endpoint answers the same metadata, as proto JSON (the plain object).
    const json = (await (
      await fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'quota', descriptors: [{ entries: [{ key: 'quota2', value: id }] }] }),
      })
    ).json()) as { dynamicMetadata?: unknown };
    expect(json.dynamicMetadata).toEqual({ domain: 'quota', descriptors: [{ entries: [`quota2=${id}`] }] });
    // Now both are over: no rule within its limit, no metadata.
    const over = await svc.client.shouldRateLimit(ask('quota', [['regular', id]], [['quota', id]]));
    expect(plainStruct(over.dynamicMetadata)).toEqual({
      domain: 'quota',
      descriptors: [{ entries: [`regular=${id}`] }, { entries: [`quota=${id}`] }],
      limitedBy: 'regular',
    });
  });
});

describe('settings of the reference', () => {
  it('QUOTA_MODE=true puts every rule in quota mode', async () => {
    const svc = await startOnRedis({ config: { 'quota.yaml': QUOTA }, env: { QUOTA_MODE: 'true' } });
    try {
      await svc.client.shouldRateLimit(ask('quota', [['regular', 'g']]));
      expect(await codes(svc.client, ask('quota', [['regular', 'g']], [['quota2', 'g']]))).toEqual(['OK', 'OVER_LIMIT', 'OK']);
      expect((await svc.client.shouldRateLimit(ask('quota', [['regular', 'g']]))).dynamicMetadata).toBeNull();
    } finally {
      await svc.stop();
    }
  });

  it('MERGE_DOMAIN_CONFIG=true merges one domain split across files; without it the duplicate keeps the service from serving', async () => {
    const files = {
      'a.yaml': 'domain: merged\ndescriptors:\n  - key: k1\n    rate_limit: {unit: hour, requests_per_unit: 10}\n',
      'b.yaml': 'domain: merged\ndescriptors:\n  - key: k2\n    rate_limit: {unit: hour, requests_per_unit: 20}\n',
    };
    const merged = await startOnRedis({ config: files, env: { MERGE_DOMAIN_CONFIG: 'true' } });
    try {
      const reply = await merged.client.shouldRateLimit(ask('merged', [['k1', 'x']], [['k2', 'y']]));
      expect(reply.statuses.map((s) => s.currentLimit?.requestsPerUnit)).toEqual([10, 20]);
    } finally {
      await merged.stop();
    }
    const strict = await startOnRedis({ config: files });
    try {
      expect(await strict.client.healthCheck('')).toBe('NOT_SERVING');
    } finally {
      await strict.stop();
    }
  });

  it('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true: not serving while no domain is loaded; by default an empty config serves', async () => {
    const strict = await startOnRedis({ env: { HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true' } });
    try {
      expect(await strict.client.healthCheck('')).toBe('NOT_SERVING');
      strict.writeConfig('edge.yaml', 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n');
      expect(
        await eventually(
          () => strict.client.healthCheck(''),
          (s) => s === 'SERVING',
        ),
      ).toBe('SERVING');
    } finally {
      await strict.stop();
    }
    const lax = await startOnRedis();
    try {
      expect(await lax.client.healthCheck('')).toBe('SERVING');
    } finally {
      await lax.stop();
    }
  });
});
