import { configFromTexts } from '../../../src/config/files';
import { silentLogger } from '../../../src/log';
import type { RlqsLimits } from '../../../src/sharing/quota/quota-budgets';
import { RlqsService, type QuotaStreamSink } from '../../../src/service/rlqs-service';
import { MemoryExchange } from '../../../src/store/memory-exchange';
import { MemoryStore } from '../../../src/store/memory-store';
import { loadProtoFiles } from '../../../src/wire/proto';
import { RLQS_PROTO } from '../../../src/wire/rlqs-codec';
import { FakeClock } from '../../helpers/fake-clock';
import { SwitchableStore } from '../../helpers/switchable-store';

/** The quota stream service without a transport: messages in, frames out, on a fake clock. */

const CONFIG = configFromTexts([{ file: 'q.yaml', text: 'domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 90}\n' }], {
  defaultAlgorithm: 'sliding_window',
});
const LIMITS: RlqsLimits = {
  maxStreams: 2,
  maxStreamsPerConnection: 2,
  maxBucketsPerStream: 10,
  maxBucketPairs: 4,
  maxBucketIdBytes: 256,
  reportIntervalMs: 5_000,
  abandonAfterIdleReports: 3,
  maxBytes: 1024 * 1024,
  syncIntervalMs: 250,
  firstReportTimeoutMs: 10_000,
  idleTimeoutMs: 30_000,
  maxReportsPerSecond: 100,
  maxProcessReportsPerSecond: 10_000,
  maxProxiesPerBudget: 1_000,
};

const root = loadProtoFiles([RLQS_PROTO]);
const Reports = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');
const Response = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse');

function message(buckets: [Record<string, string>, number, number][], domain = 'q'): Buffer {
  const bucketQuotaUsages = buckets.map(([bucket, allowed, denied]) => ({
    bucketId: { bucket },
    timeElapsed: { seconds: 0 },
    numRequestsAllowed: allowed,
    numRequestsDenied: denied,
  }));
  return Buffer.from(Reports.encode(Reports.fromObject({ domain, bucketQuotaUsages })).finish());
}

class Sink implements QuotaStreamSink {
  readonly frames: any[] = [];
  ended: { code: number; details: string } | 'ok' | undefined;
  /** What send() answers: false stands for a peer that does not keep up. */
  ready = true;
  heldBytes = 0;
  cutWith: { code: number; details: string } | undefined;
  send(message: Uint8Array): boolean {
    this.frames.push(Response.toObject(Response.decode(message), { longs: Number, oneofs: true, defaults: false }));
    return this.ready;
  }
  end(failure?: { code: number; details: string }): void {
    this.ended = failure ?? 'ok';
  }
  cut(failure: { code: number; details: string }): void {
    this.cutWith = failure;
    this.ended = failure;
  }
  last(): any {
    return this.frames.at(-1).bucketAction[0];
  }
}

/** A message's handling, with the service ticked (a sync each) while it waits for its budget's next division. */
async function handled(service: RlqsService, pending: Promise<void>): Promise<void> {
  let done = false;
  void pending.then(() => (done = true));
  for (let i = 0; i < 5 && !done; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    if (!done) await service.tick();
  }
  return pending;
}

function setup(limits: Partial<RlqsLimits> = {}) {
  const clock = new FakeClock(1_000_000);
  const memory = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  const service = new RlqsService({
    store: memory,
    exchange: new MemoryExchange({ clock }),
    config: () => CONFIG,
    logger: silentLogger(),
    limits: { ...LIMITS, ...limits },
    clock,
    replicaId: 'r',
    timers: false,
  });
  return { clock, service };
}

test('the TTL follows the observed interval between full reports; the first uses the assumed one', async () => {
  const { clock, service } = setup();
  const sink = new Sink();
  const stream = service.open(sink);
  await stream.message(message([[{ k: 'a' }, 1, 0]]));
  expect(sink.last().quotaAssignmentAction.assignmentTimeToLive.seconds).toBe(15);
  for (let i = 0; i < 2; i++) {
    clock.advance(400);
    await stream.message(message([[{ k: 'a' }, 20, 0]]));
  }
  // 3 x 400 ms, rounded up to whole seconds.
  expect(sink.last().quotaAssignmentAction.assignmentTimeToLive.seconds).toBe(2);
  expect(service.view().streams[0].reportIntervalMs).toBe(400);
});

test('demand is timed by receive times: a proxy asking little keeps what it asks, the busy one gets the rest, pushed at the next sync', async () => {
  const { clock, service } = setup();
  const [busy, light] = [new Sink(), new Sink()];
  const a = service.open(busy);
  const b = service.open(light);
  await a.message(message([[{ k: 'x' }, 1, 0]]));
  await handled(service, b.message(message([[{ k: 'x' }, 1, 0]])));
  // Both unknown: an even split, pushed to the first.
  expect(busy.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill.value).toBe(45);
  clock.advance(500);
  await b.message(message([[{ k: 'x' }, 4, 0]])); // 8/s, x 1.25 = 10/s
  // Answered from the shares in force; the sync divides again.
  expect(light.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 45 });
  await service.tick();
  expect(light.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 10 });
  expect(busy.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 80 });
});

test('a bucket idle for three full reports is abandoned, and a stream over RLQS_MAX_STREAMS is refused', async () => {
  const { clock, service } = setup();
  const sink = new Sink();
  const s = service.open(sink);
  // The transport hands over a message once the previous one's promise has settled.
  await s.message(message([[{ k: 'idle' }, 1, 0]]));
  for (let i = 0; i < 3; i++) {
    clock.advance(100);
    await s.message(message([[{ k: 'idle' }, 0, 0]]));
  }
  expect(sink.last()).toEqual({ bucketId: { bucket: { k: 'idle' } }, abandonAction: {}, bucketAction: 'abandonAction' });
  expect(service.view().streams[0].buckets).toBe(0);
  service.open(new Sink());
  const third = new Sink();
  service.open(third);
  expect(third.ended).toMatchObject({ code: 8 });
});

test('while the store fails, the last shares stay in force and the charges wait for it', async () => {
  const clock = new FakeClock(1_000_000);
  const memory = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  const flaky = new SwitchableStore(memory);
  const service = new RlqsService({ store: flaky, config: () => CONFIG, logger: silentLogger(), limits: LIMITS, clock, timers: false });
  const sink = new Sink();
  const s = service.open(sink);
  await s.message(message([[{ k: 'f' }, 1, 0]]));
  const before = sink.last().quotaAssignmentAction.rateLimitStrategy;
  flaky.down = true;
  clock.advance(200);
  await s.message(message([[{ k: 'f' }, 10, 0]]));
  await service.tick();
  expect(sink.last().quotaAssignmentAction.rateLimitStrategy).toEqual(before);
  expect(sink.ended).toBeUndefined();
  flaky.down = false;
  clock.advance(300);
  await service.tick();
  // The ten reported while the store was down reached the counter once it was back.
  expect(memory.decideNow([{ key: service.view().rules[0].counter, limit: 90, windowMs: 1_000, algorithm: 'sliding_window', hits: 0 }])[0].remaining).toBe(79);
});

test('a stream past the byte budget is refused with RESOURCE_EXHAUSTED; one silent after opening or for the idle timeout is ended', async () => {
  const { clock, service } = setup({ maxBytes: 12_000, firstReportTimeoutMs: 1_000, idleTimeoutMs: 3_000 });
  const [quiet, talker, third] = [new Sink(), new Sink(), new Sink()];
  service.open(quiet);
  const t = service.open(talker);
  service.open(third);
  expect(third.ended).toMatchObject({ code: 8 });
  await t.message(message([[{ k: 'a' }, 1, 0]]));
  clock.advance(1_500);
  service.endTimedOut();
  expect(quiet.ended).toMatchObject({ code: 4 });
  expect(talker.ended).toBeUndefined();
  clock.advance(2_000);
  service.endTimedOut();
  expect(talker.ended).toMatchObject({ code: 4 });
  expect(service.streamCount).toBe(0);
});

test("a stream's reports past RLQS_MAX_REPORTS_PER_SECOND wait: the transport reads no further meanwhile", async () => {
  const { service } = setup({ maxReportsPerSecond: 2 });
  const sink = new Sink();
  const s = service.open(sink);
  await s.message(message([[{ k: 'r1' }, 1, 0]]));
  await s.message(message([[{ k: 'r2' }, 1, 0]]));
  const started = performance.now();
  await s.message(message([[{ k: 'r3' }, 1, 0]]));
  // The clock stands still, so the third waits the half second one report's credit takes.
  expect(performance.now() - started).toBeGreaterThanOrEqual(450);
  expect(sink.frames).toHaveLength(3);
});

test('a message that is not a usage report ends the stream with INVALID_ARGUMENT, through the error catalogue', async () => {
  const { service } = setup();
  const sink = new Sink();
  await service.open(sink).message(Buffer.from([0x0a, 0xff]));
  expect(sink.ended).toMatchObject({ code: 3 });
  expect((sink.ended as { details: string }).details).toMatch(/cannot decode RateLimitQuotaUsageReports/);
});

test('shutdown ends every stream with UNAVAILABLE and withdraws its demand; new streams are refused', async () => {
  const { service } = setup();
  const sink = new Sink();
  await service.open(sink).message(message([[{ k: 's' }, 1, 0]]));
  expect(service.view().rules[0].proxies).toHaveLength(1);
  await service.shutdown();
  expect(sink.ended).toMatchObject({ code: 14 });
  expect(service.view().rules).toHaveLength(0);
  const late = new Sink();
  service.open(late);
  expect(late.ended).toMatchObject({ code: 14 });
});

test('reports of every stream together past RLQS_MAX_PROCESS_REPORTS_PER_SECOND wait their turn, after each stream its own credit', async () => {
  const { service } = setup({ maxStreams: 3, maxStreamsPerConnection: 3, maxReportsPerSecond: 100, maxProcessReportsPerSecond: 2 });
  const sinks = [new Sink(), new Sink(), new Sink()];
  const streams = sinks.map((sink) => service.open(sink));
  await streams[0].message(message([[{ k: 'p1' }, 1, 0]]));
  await streams[1].message(message([[{ k: 'p2' }, 1, 0]]));
  const started = performance.now();
  // Within its own stream's credit, past the process's: the clock stands still, so it waits the half second one report's credit takes.
  await streams[2].message(message([[{ k: 'p3' }, 1, 0]]));
  expect(performance.now() - started).toBeGreaterThanOrEqual(450);
  expect(sinks.map((s) => s.frames.length)).toEqual([1, 1, 1]);
});

test('a peer that does not keep up: pushes to it wait and go out as one message of its current assignments once it reads, and its next report waits too', async () => {
  const { service } = setup();
  const [slow, other] = [new Sink(), new Sink()];
  const s = service.open(slow);
  const o = service.open(other);
  const baseline = service.bytes;
  slow.ready = false;
  slow.heldBytes = 5_000;
  let answered = false;
  const first = s.message(message([[{ k: 'slow' }, 1, 0]])).then(() => (answered = true));
  await new Promise((resolve) => setTimeout(resolve, 20));
  // Its answer was written; what the transport holds for it counts against the byte budget, and the
  // report's handling (hence the transport's next read) waits for the peer to read.
  expect(slow.frames).toHaveLength(1);
  expect(slow.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 90 });
  expect(service.bytes - baseline).toBeGreaterThanOrEqual(5_000);
  expect(answered).toBe(false);
  // Another proxy joins: its division halves the slow one's share, which is not written to it meanwhile.
  await handled(service, o.message(message([[{ k: 'slow' }, 1, 0]])));
  expect(other.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 45 });
  expect(slow.frames).toHaveLength(1);
  // It reads: its current assignment goes out, then its next report is taken.
  slow.ready = true;
  slow.heldBytes = 0;
  s.writable();
  await first;
  expect(slow.frames).toHaveLength(2);
  expect(slow.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 45 });
  expect(service.bytes - baseline).toBeLessThan(5_000);
  expect(slow.ended).toBeUndefined();
});

test('a peer that reads nothing for its idle timeout is cut with RESOURCE_EXHAUSTED, and what it held leaves the byte budget', async () => {
  const { clock, service } = setup({ idleTimeoutMs: 3_000 });
  const [deaf, legit] = [new Sink(), new Sink()];
  const d = service.open(deaf);
  const l = service.open(legit);
  await l.message(message([[{ k: 'legit' }, 1, 0]]));
  const baseline = service.bytes;
  deaf.ready = false;
  deaf.heldBytes = 10_000;
  void d.message(message([[{ k: 'deaf' }, 1, 0]]));
  await new Promise((resolve) => setTimeout(resolve, 20));
  expect(service.bytes).toBeGreaterThan(baseline + 10_000);
  clock.advance(2_000);
  await l.message(message([[{ k: 'legit' }, 40, 0]]));
  service.endTimedOut();
  expect(deaf.ended).toBeUndefined();
  clock.advance(1_500);
  await l.message(message([[{ k: 'legit' }, 40, 0]]));
  service.endTimedOut();
  expect(deaf.cutWith).toEqual({ code: 8, details: 'the proxy has not read its quota assignments for 3000 ms (10000 bytes held for it)' });
  expect(service.streamCount).toBe(1);
  expect(service.bytes).toBeLessThanOrEqual(baseline);
  // The one beside it kept its whole budget throughout.
  expect(legit.ended).toBeUndefined();
  expect(legit.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 90 });
});

test('a stream whose held output would pass the byte budget is cut with RESOURCE_EXHAUSTED; the stream beside it is served', async () => {
  const { service } = setup({ maxBytes: 64 * 1024 });
  const [deaf, legit] = [new Sink(), new Sink()];
  const d = service.open(deaf);
  const l = service.open(legit);
  deaf.ready = false;
  deaf.heldBytes = 60_000;
  await d.message(message([[{ k: 'deaf' }, 1, 0]]));
  expect(deaf.cutWith).toMatchObject({
    code: 8,
    details: expect.stringMatching(
      /^the proxy is not reading its quota assignments: the 60000 bytes held for it would pass the quota streams' memory budget \(RLQS_MAX_MEMORY_BYTES, 65536 bytes\)$/,
    ),
  });
  await l.message(message([[{ k: 'legit' }, 1, 0]]));
  expect(legit.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 90 });
  expect(service.streamCount).toBe(1);
});
