import { startTestService, type TestService } from '../../helpers/service';
import { EnvoyQuotaClient } from '../../helpers/envoy-quota-client';
import { admittedBetween, driveLoad, windowExtremes } from '../../helpers/quota-load';

/**
 * One global limit divided among proxies by their demand: proxies as Envoy's quota filter behaves
 * (test/helpers/envoy-quota-client.ts), reporting every 200 ms, against the real service.
 */

const LIMIT = 100;
const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}}
`;
const REPORT_MS = 200;

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService({ config: { 'quota.yaml': CONFIG }, env: { GRPC_TRANSPORT: 'grpc-js' } });
});
afterAll(() => svc.stop());

function proxies(n: number): EnvoyQuotaClient[] {
  return Array.from({ length: n }, () => new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: REPORT_MS }));
}

test('three proxies each offering the whole limit admit between 0.8 and 1.25 times the limit per window', async () => {
  const ps = proxies(3);
  try {
    const log = await driveLoad(
      ps.map((proxy) => ({ proxy, bucket: { tenant: 'three' }, rate: LIMIT })),
      7_000,
    );
    // From 2.5 s on: three subscriptions' first reports and pushes have settled even on a loaded machine.
    const { min, max } = windowExtremes(log, 1_000, 2_500, 7_000);
    console.log({ min, max, perProxy: ps.map((_, i) => admittedBetween(log, 2_500, 7_000, [i])) });
    expect(max).toBeLessThanOrEqual(1.25 * LIMIT);
    expect(min).toBeGreaterThanOrEqual(0.8 * LIMIT);
  } finally {
    for (const p of ps) p.close();
  }
});

test('with uneven demand the light proxy gets what it offers and the heavy one the rest', async () => {
  const [heavy, light] = proxies(2);
  try {
    const log = await driveLoad(
      [
        { proxy: heavy, bucket: { tenant: 'uneven' }, rate: 2 * LIMIT },
        { proxy: light, bucket: { tenant: 'uneven' }, rate: 0.2 * LIMIT },
      ],
      7_000,
    );
    // From 2 s on, as above. The light proxy's small bucket refuses a burst: on a loaded machine the
    // load's timer fires late and sends a few requests at once, so its share is checked at 0.8 of its
    // offer (0.83 to 1.0 measured on 2 cores shared with the service), and the worst second at 0.7 of
    // the limit (a stalled second of the heavy proxy; 0.71 to 0.96 measured).
    const lightAdmitted = admittedBetween(log, 2_000, 7_000, [1]);
    const lightOffered = 0.2 * LIMIT * 5;
    const { min, max } = windowExtremes(log, 1_000, 2_000, 7_000);
    console.log({ lightAdmitted, lightOffered, min, max });
    expect(lightAdmitted / lightOffered).toBeGreaterThanOrEqual(0.8);
    expect(max).toBeLessThanOrEqual(1.25 * LIMIT);
    expect(min).toBeGreaterThanOrEqual(0.7 * LIMIT);
  } finally {
    heavy.close();
    light.close();
  }
});
