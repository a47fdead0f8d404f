import { loadProtoFiles } from '../../../src/wire/proto';
import { RLQS_PROTO } from '../../../src/wire/rlqs-codec';
import { rlsClient, type RlsRequestInput } from '../../helpers/grpc-client';
import { inTurns, legitCalls, summary } from '../../helpers/load-turns';
import { quotaFleet } from '../../helpers/quota-fleet';
import { spawnService } from '../../helpers/spawned-service';

/**
 * Many quota streams (RLQS) sharing buckets, each within every cap of its own, beside legitimate
 * callers on the real service: what they cost RLS calls.
 */

const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 1000000}
`;

const types = loadProtoFiles([RLQS_PROTO]);
const Reports = types.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');

function reportBytes(usages: { bucket: Record<string, string>; allowed: number; denied?: number }[], domain = 'quota'): Uint8Array {
  return Reports.encode(
    Reports.fromObject({
      domain,
      bucketQuotaUsages: usages.map((u) => ({
        bucketId: { bucket: u.bucket },
        timeElapsed: { seconds: 1 },
        numRequestsAllowed: u.allowed,
        numRequestsDenied: u.denied ?? 0,
      })),
    }),
  ).finish();
}

const API_CALL = (i: number): RlsRequestInput => ({ domain: 'quota', descriptors: [{ entries: [{ key: 'api', value: `a${i % 10}` }] }] });

test('96 streams on 6 connections reporting 20 shared buckets 10 times a second cost RLS calls beside them no error, and their p99 stays within 2x of the same calls alone', async () => {
  const svc = await spawnService({ config: { 'quota.yaml': CONFIG } });
  const client = rlsClient(`127.0.0.1:${svc.grpcPort}`);
  // Every stream reports the same 20 buckets: each bucket's budget has 96 members.
  const message = reportBytes(Array.from({ length: 20 }, (_, k) => ({ bucket: { tenant: `shared-${k}` }, allowed: 1, denied: 1 })));
  const fleet = quotaFleet({ target: `127.0.0.1:${svc.grpcPort}`, connections: 6, streamsPerConnection: 16, message, intervalMs: 100 });
  try {
    // The fleet joins (every stream subscribes to the 20 buckets), then the calls warm up.
    await legitCalls(client, 200, 1_500, API_CALL);
    const rssBefore = svc.rssBytes();
    let rssMax = rssBefore;
    const sampler = setInterval(() => (rssMax = Math.max(rssMax, svc.rssBytes())), 100);
    // In turns of 1 s, so that other test files' load weighs on both halves alike; a call sent in the
    // first 300 ms after a switch counts for neither (what the service still had of the fleet's reports).
    const { loaded, alone, switches } = await inTurns(client, fleet, {
      turns: 10,
      turnMs: 1_000,
      settleMs: 300,
      callsPerSecond: 200,
      request: API_CALL,
      sample: () => svc.cpuSeconds(),
    });
    clearInterval(sampler);
    const stats = await fleet.stop();
    const withFleet = summary(loaded);
    const without = summary(alone);
    const growthMb = (rssMax - rssBefore) / 2 ** 20;
    // The service's CPU per second of wall time, over the turns with the fleet and without.
    const cpu = { withFleet: 0, without: 0 };
    const wall = { withFleet: 0, without: 0 };
    for (let i = 0; i + 1 < switches.length; i++) {
      const half = switches[i].loaded ? 'withFleet' : 'without';
      cpu[half] += switches[i + 1].sample - switches[i].sample;
      wall[half] += (switches[i + 1].atMs - switches[i].atMs) / 1000;
    }
    const cores = { withFleet: (cpu.withFleet / wall.withFleet).toFixed(2), without: (cpu.without / wall.without).toFixed(2) };
    console.log('96 streams x 20 shared buckets beside RLS', { withFleet, without, fleet: stats, cores, growthMb: growthMb.toFixed(1) });
    expect(Math.min(withFleet.calls, without.calls)).toBeGreaterThan(600);
    expect(withFleet.errors).toBe(0);
    expect(without.errors).toBe(0);
    // Each turn of the fleet sends 96 x 10 reports: most of them were answered (the rest wait in flow control).
    expect(stats.received).toBeGreaterThan(0.5 * stats.sent);
    expect(stats.ended).toEqual({});
    expect(withFleet.p99).toBeLessThan(2 * without.p99);
  } finally {
    client.close();
    await fleet.stop();
    await svc.stop();
  }
}, 60_000);
