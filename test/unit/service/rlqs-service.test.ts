import { configFromTexts } from '../../../src/config/files';
import { silentLogger } from '../../../src/log';
import { StoreUnavailableError, type Store } from '../../../src/limiter/store';
import { RlqsService, type QuotaStreamSink, type RlqsLimits } from '../../../src/service/rlqs-service';
import { MemoryStore } from '../../../src/store/memory-store';
import { loadProtoFiles } from '../../../src/wire/proto';
import { RLQS_PROTO } from '../../../src/wire/rlqs-codec';
import { FakeClock } from '../../helpers/fake-clock';

/** The quota stream service without a transport: messages in, frames out, on a fake clock. */

const CONFIG = configFromTexts([{ file: 'q.yaml', text: 'domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 90}\n' }], {
  defaultAlgorithm: 'sliding_window',
});
const LIMITS: RlqsLimits = {
  maxStreams: 2,
  maxBucketsPerStream: 10,
  maxBucketPairs: 4,
  maxBucketIdBytes: 256,
  reportIntervalMs: 5_000,
  abandonAfterIdleReports: 3,
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
  send(frame: Buffer): void {
    this.frames.push(Response.toObject(Response.decode(frame.subarray(5)), { longs: Number, oneofs: true, defaults: false }));
  }
  end(failure?: { code: number; details: string }): void {
    this.ended = failure ?? 'ok';
  }
  last(): any {
    return this.frames.at(-1).bucketAction[0];
  }
}

const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

function setup(store?: Store) {
  const clock = new FakeClock(1_000_000);
  const memory = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  const service = new RlqsService({ store: store ?? memory, config: () => CONFIG, logger: silentLogger(), limits: LIMITS, clock, replicaId: 'r' });
  return { clock, service };
}

test('the TTL follows the observed interval between full reports; the first uses the assumed one', async () => {
  const { clock, service } = setup();
  const sink = new Sink();
  const stream = service.open(sink);
  stream.message(message([[{ k: 'a' }, 1, 0]]));
  await flush();
  expect(sink.last().quotaAssignmentAction.assignmentTimeToLive.seconds).toBe(15);
  for (let i = 0; i < 2; i++) {
    clock.advance(400);
    stream.message(message([[{ k: 'a' }, 20, 0]]));
    await flush();
  }
  // 3 x 400 ms, rounded up to whole seconds.
  expect(sink.last().quotaAssignmentAction.assignmentTimeToLive.seconds).toBe(2);
  expect(service.view().streams[0].reportIntervalMs).toBe(400);
});

test('demand is timed by receive times: a proxy asking little keeps what it asks, the busy one gets the rest, pushed at once', async () => {
  const { clock, service } = setup();
  const [busy, light] = [new Sink(), new Sink()];
  const a = service.open(busy);
  const b = service.open(light);
  a.message(message([[{ k: 'x' }, 1, 0]]));
  await flush();
  b.message(message([[{ k: 'x' }, 1, 0]]));
  await flush();
  // Both unknown: an even split, pushed to the first.
  expect(busy.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill.value).toBe(45);
  clock.advance(500);
  b.message(message([[{ k: 'x' }, 4, 0]])); // 8/s, x 1.25 = 10/s
  await flush();
  expect(light.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 10 });
  expect(busy.last().quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 80 });
});

test('a bucket idle for three full reports is abandoned, and a stream over RLQS_MAX_STREAMS is refused', async () => {
  const { clock, service } = setup();
  const sink = new Sink();
  const s = service.open(sink);
  s.message(message([[{ k: 'idle' }, 1, 0]]));
  for (let i = 0; i < 3; i++) {
    clock.advance(100);
    s.message(message([[{ k: 'idle' }, 0, 0]]));
  }
  await flush();
  await flush();
  expect(sink.last()).toEqual({ bucketId: { bucket: { k: 'idle' } }, abandonAction: {}, bucketAction: 'abandonAction' });
  expect(service.view().streams[0].buckets).toBe(0);
  service.open(new Sink());
  const third = new Sink();
  service.open(third);
  expect(third.ended).toMatchObject({ code: 8 });
});

test('while the store fails, the last shares stay in force', async () => {
  const clock = new FakeClock(1_000_000);
  const memory = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  let down = false;
  const flaky: Store = {
    name: 'flaky',
    decide: (c, o) => (down ? Promise.reject(new StoreUnavailableError('down')) : memory.decide(c, o)),
    exchangeDemand: (x) => (down ? Promise.reject(new StoreUnavailableError('down')) : memory.exchangeDemand(x)),
    isHealthy: () => !down,
    close: () => memory.close(),
  };
  const service = new RlqsService({ store: flaky, config: () => CONFIG, logger: silentLogger(), limits: LIMITS, clock });
  const sink = new Sink();
  const s = service.open(sink);
  s.message(message([[{ k: 'f' }, 1, 0]]));
  await flush();
  const before = sink.last().quotaAssignmentAction.rateLimitStrategy;
  down = true;
  clock.advance(200);
  s.message(message([[{ k: 'f' }, 10, 0]]));
  await flush();
  expect(sink.last().quotaAssignmentAction.rateLimitStrategy).toEqual(before);
  expect(sink.ended).toBeUndefined();
});

test('shutdown ends every stream with UNAVAILABLE and withdraws its demand; new streams are refused', async () => {
  const { service } = setup();
  const sink = new Sink();
  service.open(sink).message(message([[{ k: 's' }, 1, 0]]));
  await flush();
  expect(service.view().rules[0].proxies).toHaveLength(1);
  await service.shutdown();
  expect(sink.ended).toMatchObject({ code: 14 });
  expect(service.view().rules).toHaveLength(0);
  const late = new Sink();
  service.open(late);
  expect(late.ended).toMatchObject({ code: 14 });
});
