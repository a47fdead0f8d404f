import { isReady } from '../../../src/service/health';
import { HealthState } from '../../../src/service/health';
import type { FailurePolicy } from '../../../src/settings/settings';

/** Readiness (GET /readyz) against every failure policy, with the store up and down. */

function health(conditions: { config: boolean; store: boolean; running: boolean }): HealthState {
  const h = new HealthState();
  h.set('config', conditions.config);
  h.set('store', conditions.store);
  if (!conditions.running) h.beginShutdown();
  return h;
}

describe('readiness', () => {
  const up = { config: true, store: true, running: true };

  it.each<FailurePolicy>(['error', 'allow', 'deny', 'local'])('is ready with a config and a store under %s', (policy) => {
    expect(isReady(health(up), { storeFailurePolicy: policy })).toBe(true);
  });

  it('follows the store under the default policy, error: the store is the only way to answer', () => {
    expect(isReady(health({ ...up, store: false }), { storeFailurePolicy: 'error' })).toBe(false);
  });

  it.each<FailurePolicy>(['allow', 'deny', 'local'])('stays ready without the store under %s, which answers without it', (policy) => {
    expect(isReady(health({ ...up, store: false }), { storeFailurePolicy: policy })).toBe(true);
  });

  it.each<FailurePolicy>(['error', 'allow'])('is never ready without a config or after SIGTERM (%s)', (policy) => {
    expect(isReady(health({ ...up, config: false }), { storeFailurePolicy: policy })).toBe(false);
    expect(isReady(health({ ...up, running: false }), { storeFailurePolicy: policy })).toBe(false);
  });
});
