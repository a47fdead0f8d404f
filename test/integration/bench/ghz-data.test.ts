import * as path from 'node:path';
import type * as protobuf from 'protobufjs';
import { REPO_ROOT, callTypes, fromProtoJson, ghzMessages, loadGhzConfig, loadGhzProto, renderCallTemplate, unaryCaller } from '../../load/ghz-data';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The load test's request data (test/load/ghz.json) is what ghz will send: it decodes against
 * proto/ field by field, and a live server serving examples/ answers each message as the limits
 * there say it should.
 */

const config = loadGhzConfig();
const types = callTypes(loadGhzProto(config), config.call);
const raw = ghzMessages(config);
const TEMPLATE_VALUES = { WorkerID: 'g0c0', RequestNumber: 1 };

type Answer = Record<string, any>;

function message(i: number): protobuf.Message {
  return fromProtoJson(types.request, renderCallTemplate(raw[i], TEMPLATE_VALUES), `data[${i}]`);
}

/** Index of the data message whose descriptors' entries, as "key=value" lists, are these. */
function indexOf(domain: string, ...descriptors: string[][]): number {
  const i = raw.findIndex((m) => {
    const r = renderCallTemplate(m, TEMPLATE_VALUES) as Answer;
    const shape = (r.descriptors as Answer[]).map((d) => (d.entries as Answer[]).map((e) => `${e.key}=${e.value}`));
    return r.domain === domain && JSON.stringify(shape) === JSON.stringify(descriptors);
  });
  if (i < 0) throw new Error(`ghz.json has no message ${domain} ${JSON.stringify(descriptors)}`);
  return i;
}

describe('ghz request data', () => {
  test('names a method of the proto files, with import paths that resolve', () => {
    expect(config.proto).toBe('proto/envoy/service/ratelimit/v3/rls.proto');
    expect(types.path).toBe('/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit');
    expect(config['import-paths'].map((p) => path.resolve(REPO_ROOT, p))).toContain(path.join(REPO_ROOT, 'proto'));
    expect(config.insecure).toBe(true);
  });

  test('ends a timed run cleanly and keeps per-worker keys readable, as ghz reads its options', () => {
    // ghz's default, close, cuts the calls in flight when the time is up: they end as errors.
    expect(config['duration-stop']).toBe('wait');
    // ghz prefixes its worker ids (g0c0, g1c0, ...) with the config's name: none, so the key stays client-g0c0.
    expect(config.name).toBeUndefined();
    expect(JSON.stringify(raw)).toContain('"client-{{.WorkerID}}"');
  });

  test('is a round-robin list of several descriptor shapes', () => {
    expect(Array.isArray(config.data)).toBe(true);
    const shapes = new Set(raw.map((m) => JSON.stringify((m.descriptors as Answer[]).map((d) => (d.entries as Answer[]).map((e) => e.key)))));
    expect(shapes.size).toBeGreaterThanOrEqual(5);
  });

  test.each(raw.map((_m, i) => [i]))('message %i decodes against proto/ with every field known', (i) => {
    const msg = message(i);
    expect(types.request.verify(msg)).toBeNull();
    const roundTrip = types.request.toObject(types.request.decode(types.request.encode(msg).finish()), { defaults: false });
    const rendered = renderCallTemplate(raw[i], TEMPLATE_VALUES) as Answer;
    expect(roundTrip.domain).toBe(rendered.domain);
    expect(roundTrip.descriptors).toEqual(rendered.descriptors);
    expect(roundTrip.hits_addend ?? 0).toBe(rendered.hits_addend ?? 0);
  });

  test('a misspelled field is rejected rather than dropped, as ghz would reject it', () => {
    expect(() => fromProtoJson(types.request, { domain: 'edge', descriptor: [] })).toThrow(/descriptor: no such field/);
  });

  test('template actions are evaluated per call, and unknown ones are refused', () => {
    expect(renderCallTemplate({ v: 'client-{{.WorkerID}}' }, { WorkerID: 'w7' })).toEqual({ v: 'client-w7' });
    expect(() => renderCallTemplate({ v: '{{.Nope}}' }, {})).toThrow(/Nope/);
  });
});

describe('ghz request data against a live server serving examples/', () => {
  let svc: TestService;
  let caller: ReturnType<typeof unaryCaller>;

  beforeAll(async () => {
    svc = await startTestService({ env: { CONFIG_PATH: path.join(REPO_ROOT, 'examples') } });
    caller = unaryCaller(svc.addr, types);
  });

  afterAll(async () => {
    caller?.close();
    await svc?.stop();
  });

  const send = (i: number): Promise<Answer> => caller.call(message(i));

  test('every message gets an answer, never UNKNOWN', async () => {
    for (let i = 0; i < raw.length; i++) {
      const answer = await send(i);
      expect({ i, code: answer.overall_code }).toEqual({ i, code: expect.stringMatching(/^(OK|OVER_LIMIT)$/) });
      expect(answer.statuses).toHaveLength((raw[i].descriptors as unknown[]).length);
    }
  });

  test('a per-worker API key gets 5 per 10 seconds', async () => {
    const answer: Answer = await caller.call(
      fromProtoJson(types.request, renderCallTemplate(raw[indexOf('edge', ['api_key=client-g0c0'])], { WorkerID: 'fresh' })),
    );
    expect(answer.overall_code).toBe('OK');
    expect(answer.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 5, unit: 'SECOND' }, limit_remaining: 4 });
  });

  test("Envoy's /api/ request shape gets one status per descriptor, the shadow-mode budget included", async () => {
    const i = indexOf('edge', ['api_key=demo'], ['path=/api/orders'], ['remote_address=203.0.113.7'], ['generic_key=all']);
    const answer = await send(i);
    expect(answer.overall_code).toBe('OK');
    expect(answer.statuses.map((s: Answer) => s.current_limit.requests_per_unit)).toEqual([5, 50, 300, 1000]);
  });

  test('the nested login rule admits exactly 5 attempts per minute per address', async () => {
    const i = indexOf('edge', ['route=login', 'remote_address=198.51.100.23']);
    const codes: string[] = [];
    // The round above already sent this message once.
    for (let n = 0; n < 5; n++) codes.push((await send(i)).overall_code);
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OK', 'OVER_LIMIT']);
  });

  test('an internal-* API key is unlimited', async () => {
    const answer = await send(indexOf('edge', ['api_key=internal-batch']));
    expect(answer.overall_code).toBe('OK');
    expect(answer.statuses[0].limit_remaining).toBe(4294967295);
  });

  test('a descriptor no rule matches is OK without a limit', async () => {
    const answer = await send(indexOf('edge', ['tenant=no-rule-matches']));
    expect(answer.overall_code).toBe('OK');
    expect(answer.statuses[0].current_limit).toBeNull();
  });

  test('hits_addend 2 on the reports wildcard takes two of its 10 per minute', async () => {
    const data = renderCallTemplate(raw[indexOf('edge', ['path=/api/reports/daily'])], TEMPLATE_VALUES) as Answer;
    // A path of its own, so the count starts from zero whatever the wall clock's window.
    data.descriptors[0].entries[0].value = '/api/reports/weekly';
    const answer: Answer = await caller.call(fromProtoJson(types.request, data));
    expect(answer.statuses[0]).toMatchObject({ code: 'OK', current_limit: { requests_per_unit: 10, unit: 'MINUTE', name: 'reports' }, limit_remaining: 8 });
  });

  test("Istio's /productpage gets 1 per minute in the ratelimit domain", async () => {
    const i = indexOf('ratelimit', ['PATH=/productpage']);
    await send(i);
    const answer = await send(i);
    expect(answer.overall_code).toBe('OVER_LIMIT');
    expect(answer.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', current_limit: { requests_per_unit: 1, unit: 'MINUTE' }, limit_remaining: 0 });
  });

  test("the sidecar's nested (destination, PATH) descriptor gets the productpage inbound budget", async () => {
    const answer = await send(indexOf('ratelimit', ['destination=productpage', 'PATH=/api/v1/products/1']));
    expect(answer.overall_code).toBe('OK');
    expect(answer.statuses[0].current_limit).toMatchObject({ requests_per_unit: 600, unit: 'MINUTE' });
  });
});
