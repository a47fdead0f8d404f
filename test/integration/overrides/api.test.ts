import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log';
import { capturedLogger } from '../../helpers/captured-logger';
import { descriptor } from '../../helpers/grpc-client';
import { overridesClient, tokensFile, within, type OverridesClient } from '../../helpers/overrides';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The override API on the real service with the memory store: its answers (200, 400, 401, 404, 405,
 * 413), the decision following every change at once on this replica, what the views say of an
 * override (/rlmatch, /top, metrics, one log line per change), the tokens file read again, expiry,
 * restarts with and without OVERRIDES_FILE, and a config reload.
 */

const CONFIG = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000}
`;
const ALICE = 'alice-token-0123456789abcdef';
const BOB = 'bob-token-0123456789abcdef';

const key = (value: string) => ({ domain: 'edge', descriptor: [{ key: 'api_key', value }] });
const perMinute = (n: number) => ({ unit: 'minute', requests_per_unit: n });

describe('the override API on the memory store', () => {
  let tokens: ReturnType<typeof tokensFile>;
  beforeEach(() => {
    tokens = tokensFile({ alice: ALICE });
  });
  afterEach(() => tokens.remove());

  const start = (env: Record<string, string> = {}, logger?: ReturnType<typeof createLogger>): Promise<TestService> =>
    startTestService({ config: { 'edge.yaml': CONFIG }, env: { ADMIN_TOKENS_FILE: tokens.path, ...env }, logger });
  const limitOf = async (svc: TestService, value: string): Promise<{ limit: number | undefined; remaining: number; code: string }> => {
    const s = (await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', value]])] })).statuses[0];
    return { limit: s.currentLimit?.requestsPerUnit, remaining: s.limitRemaining, code: s.code };
  };

  it('is not served without ADMIN_TOKENS_FILE (404)', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': CONFIG } });
    try {
      expect((await overridesClient(svc.service.httpPort, ALICE).put({ ...key('a'), rate_limit: perMinute(1) })).status).toBe(404);
    } finally {
      await svc.stop();
    }
  });

  it('answers 401 and nothing more without a token, with a wrong one or another scheme, changing nothing', async () => {
    const svc = await start();
    try {
      const port = svc.service.httpPort;
      for (const client of [overridesClient(port, undefined), overridesClient(port, `${ALICE}x`), overridesClient(port, ALICE.slice(0, -1))]) {
        const answer = await client.put({ ...key('a'), rate_limit: perMinute(1) });
        expect(answer).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
        expect(answer.headers.get('www-authenticate')).toBe('Bearer');
      }
      const basic = await overridesClient(port, undefined).raw('GET', '/v1/overrides?domain=edge', { headers: { authorization: `Basic ${ALICE}` } });
      expect(basic.status).toBe(401);
      expect((await overridesClient(port, ALICE).get('domain=edge')).body).toEqual({ overrides: [], next: null });
    } finally {
      await svc.stop();
    }
  });

  it('sets, reads, lists and deletes an override, the decision following each change at once', async () => {
    const svc = await start();
    try {
      const api = overridesClient(svc.service.httpPort, ALICE);
      for (let i = 0; i < 3; i++) await limitOf(svc, 'alice');
      const put = await api.put({ ...key('alice'), rate_limit: perMinute(4), note: 'trial until Monday' });
      expect(put.status).toBe(200);
      expect(put.body).toMatchObject({ ...key('alice'), rate_limit: perMinute(4), note: 'trial until Monday', version: 1, updated_by: 'alice' });
      // Three hits so far count against the new limit.
      expect(await limitOf(svc, 'alice')).toEqual({ limit: 4, remaining: 0, code: 'OK' });
      expect(await limitOf(svc, 'alice')).toMatchObject({ code: 'OVER_LIMIT' });
      expect(await limitOf(svc, 'bob')).toEqual({ limit: 10, remaining: 9, code: 'OK' });

      expect((await api.get('domain=edge&descriptor=api_key=alice')).body).toEqual(put.body);
      expect((await api.get('domain=edge&entry=api_key=alice')).body).toEqual(put.body);
      expect((await api.get('domain=edge&descriptor=api_key=nobody')).status).toBe(404);
      await api.put({ ...key('carol'), rate_limit: { unlimited: true } });
      const page = await api.get('domain=edge&limit=1');
      expect(page.body.overrides).toHaveLength(1);
      expect(page.body.overrides[0].descriptor).toEqual(key('alice').descriptor);
      const rest = await api.get(`domain=edge&limit=1&cursor=${page.body.next}`);
      expect(rest.body).toMatchObject({ overrides: [{ descriptor: key('carol').descriptor }], next: null });

      expect((await api.del(key('alice'))).body).toMatchObject({ rate_limit: perMinute(4), version: 1 });
      expect((await api.del(key('alice'))).status).toBe(404);
      expect(await limitOf(svc, 'alice')).toMatchObject({ limit: 10, code: 'OK' });
    } finally {
      await svc.stop();
    }
  });

  it('answers a bad body, query or method with 400 (naming the field) or 405, and a body past its cap with 413 naming OVERRIDES_MAX_BODY_BYTES', async () => {
    const svc = await start({ OVERRIDES_MAX_BODY_BYTES: '2048' });
    try {
      const api = overridesClient(svc.service.httpPort, ALICE);
      expect(await api.raw('PUT', '/v1/overrides', { body: '{"domain":' })).toMatchObject({ status: 400, body: { error: 'body: not JSON' } });
      expect(await api.put({ ...key('a'), rate_limit: { unit: 'fortnight', requests_per_unit: 1 } })).toMatchObject({
        status: 400,
        body: { error: 'rate_limit.unit: unknown unit "fortnight"' },
      });
      expect(await api.put({ domain: 'edge', descriptor: [{ key: 'user', value: 'x' }], rate_limit: perMinute(1) })).toMatchObject({
        status: 400,
        body: { error: 'descriptor[0].key: no rule for key "user" under domain "edge"' },
      });
      expect(await api.put({ ...key('a'), rate_limit: perMinute(1), owner: 'x' })).toMatchObject({
        status: 400,
        body: { error: expect.stringMatching(/^owner: unknown field/) },
      });
      expect(await api.get('descriptor=api_key=a')).toMatchObject({ status: 400, body: { error: 'domain: required (?domain=D)' } });
      expect(await api.get('domain=edge&descriptor=api_key')).toMatchObject({ status: 400 });
      expect(await api.get('domain=edge&limit=5000')).toMatchObject({ status: 400, body: { error: 'limit: expected an integer from 1 to 1000' } });
      expect((await api.raw('POST', '/v1/overrides', { body: '{}' })).status).toBe(405);
      const large = await api.put({ ...key('a'), rate_limit: perMinute(1), note: 'n'.repeat(3_000) });
      expect(large).toMatchObject({
        status: 413,
        body: { cap: 'OVERRIDES_MAX_BODY_BYTES', error: 'request body larger than 2048 bytes (OVERRIDES_MAX_BODY_BYTES)' },
      });
      expect((await api.get('domain=edge')).body.overrides).toEqual([]);
    } finally {
      await svc.stop();
    }
  });

  it('says which override decided in /rlmatch, marks its descriptor in /top, counts it in the metrics, and logs each change once with its actor and both limits', async () => {
    // The default LOG_LEVEL (warn): the change lines are written all the same.
    let logged = '';
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        logged += chunk.toString();
        done();
      },
    });
    const svc = await start({}, createLogger({ level: 'warn', format: 'json', destination }));
    try {
      const api = overridesClient(svc.service.httpPort, ALICE);
      await api.put({ ...key('dan'), rate_limit: perMinute(2) });
      await api.put({ ...key('dan'), rate_limit: perMinute(3), expires_at: '2099-01-01T00:00:00Z' });
      const debug = `http://127.0.0.1:${svc.service.debugPort}`;
      const match = (await (await fetch(`${debug}/rlmatch?domain=edge&entry=api_key=dan`)).json()) as { rule: Record<string, any> };
      expect(match.rule).toMatchObject({ requestsPerUnit: 3, unit: 'minute' });
      expect(match.rule.override).toMatchObject({
        version: 2,
        updatedBy: 'alice',
        expiresAt: '2099-01-01T00:00:00.000Z',
        configLimit: { requestsPerUnit: 10 },
      });
      const plain = (await (await fetch(`${debug}/rlmatch?domain=edge&entry=api_key=eve`)).json()) as { rule: Record<string, any> };
      expect(plain.rule.override).toBeUndefined();

      for (let i = 0; i < 5; i++) {
        await limitOf(svc, 'dan');
        await limitOf(svc, 'eve');
      }
      const top = (await (await fetch(`${debug}/top?domain=edge&by=allowed`)).json()) as { entries: { descriptor: [string, string][]; override?: object }[] };
      const dan = top.entries.find((e) => e.descriptor[0][1] === 'dan');
      const eve = top.entries.find((e) => e.descriptor[0][1] === 'eve');
      expect(dan?.override).toEqual({ requests_per_unit: 3, unit: 'minute', unit_multiplier: 1, algorithm: 'sliding_window', unlimited: false, version: 2 });
      expect(eve).toBeDefined();
      expect(eve!.override).toBeUndefined();
      const rules = (await (await fetch(`${debug}/top/rules`)).json()) as {
        rules: { limit: { requests_per_unit: number }; entries: { override?: object }[] }[];
      };
      // The rule shows the config's limit; its overridden row is marked.
      expect(rules.rules[0].limit.requests_per_unit).toBe(10);
      expect(rules.rules[0].entries.filter((e) => e.override !== undefined)).toHaveLength(1);

      await api.del(key('dan'));
      const metrics = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
      expect(metrics).toContain('ratelimit_service_override_changes_total{domain="edge",action="create"} 1');
      expect(metrics).toContain('ratelimit_service_override_changes_total{domain="edge",action="update"} 1');
      expect(metrics).toContain('ratelimit_service_override_changes_total{domain="edge",action="delete"} 1');
      await api.put({ ...key('fay'), rate_limit: perMinute(2) });
      expect(await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text()).toContain('ratelimit_service_overrides{domain="edge"} 1');

      const changes = logged
        .split('\n')
        .filter((l) => l.includes('override changed'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(changes.map((c) => [c.action, c.actor, c.old, c.new])).toEqual([
        ['create', 'alice', null, perMinute(2)],
        ['update', 'alice', perMinute(2), perMinute(3)],
        ['delete', 'alice', perMinute(3), null],
        ['create', 'alice', null, perMinute(2)],
      ]);
      expect(changes[0]).toMatchObject({ domain: 'edge', descriptor: [{ key: 'api_key', value: 'dan' }], version: 1 });
    } finally {
      await svc.stop();
    }
  });

  it('reads the tokens file again when it changes: a new token works, a removed one no longer does', async () => {
    const svc = await start();
    try {
      const port = svc.service.httpPort;
      expect((await overridesClient(port, BOB).get('domain=edge')).status).toBe(401);
      tokens.rewrite({ bob: BOB });
      await within('the new token', 3_000, async () => (await overridesClient(port, BOB).get('domain=edge')).status === 200);
      expect((await overridesClient(port, ALICE).get('domain=edge')).status).toBe(401);
      expect((await overridesClient(port, BOB).put({ ...key('g'), rate_limit: perMinute(1) })).body.updated_by).toBe('bob');
      // A broken new version keeps the tokens in force.
      fs.writeFileSync(tokens.path, 'just-one-field\n');
      await new Promise((r) => setTimeout(r, 1_500));
      expect((await overridesClient(port, BOB).get('domain=edge')).status).toBe(200);
    } finally {
      await svc.stop();
    }
  });

  it('stops applying an override within 1 s of its expires_at', async () => {
    const svc = await start();
    try {
      const api = overridesClient(svc.service.httpPort, ALICE);
      const expiresAtMs = Date.now() + 1_500;
      await api.put({ ...key('hal'), rate_limit: perMinute(2), expires_at: new Date(expiresAtMs).toISOString() });
      expect((await limitOf(svc, 'hal')).limit).toBe(2);
      await within('the override in force until its expiry', 5_000, async () => Date.now() >= expiresAtMs);
      const ms = await within('the config limit back', 2_000, async () => (await limitOf(svc, 'hal')).limit === 10);
      expect(ms).toBeLessThan(1_000);
      expect((await api.get('domain=edge&descriptor=api_key=hal')).status).toBe(404);
    } finally {
      await svc.stop();
    }
  });

  it('keeps overrides across a restart in OVERRIDES_FILE, and says at start that without it they are lost', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-overrides-restart-'));
    const file = path.join(dir, 'overrides.ndjson');
    try {
      const log = capturedLogger();
      const volatile = await start({}, log.logger);
      expect(log.lines().some((l) => l.msg.includes('lost at restart (set OVERRIDES_FILE to keep them)'))).toBe(true);
      await overridesClient(volatile.service.httpPort, ALICE).put({ ...key('ivy'), rate_limit: perMinute(1) });
      await volatile.stop();
      const again = await start();
      expect((await limitOf(again, 'ivy')).limit).toBe(10);
      await again.stop();

      const kept = await start({ OVERRIDES_FILE: file });
      await overridesClient(kept.service.httpPort, ALICE).put({ ...key('ivy'), rate_limit: perMinute(1) });
      await kept.stop();
      const restarted = await start({ OVERRIDES_FILE: file });
      try {
        // Its first answer already uses the override.
        expect(await limitOf(restarted, 'ivy')).toEqual({ limit: 1, remaining: 0, code: 'OK' });
      } finally {
        await restarted.stop();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('leaves overrides in place through a config reload', async () => {
    const svc = await start();
    try {
      await overridesClient(svc.service.httpPort, ALICE).put({ ...key('jo'), rate_limit: perMinute(2) });
      const generation = svc.service.configSource.generation;
      svc.writeConfig('edge.yaml', CONFIG.replace('requests_per_unit: 10', 'requests_per_unit: 20'));
      await within('the reload', 5_000, async () => svc.service.configSource.generation > generation);
      expect((await limitOf(svc, 'other')).limit).toBe(20);
      expect((await limitOf(svc, 'jo')).limit).toBe(2);
    } finally {
      await svc.stop();
    }
  });
});

export type { OverridesClient };
