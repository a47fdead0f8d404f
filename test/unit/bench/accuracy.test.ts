import { MODES, replay, runAccuracy, scenarios, type AccuracyResult, type ScenarioAccuracy } from '../../../bench/accuracy';

describe('algorithm accuracy instrument', () => {
  let result: AccuracyResult;
  const scenario = (name: string): ScenarioAccuracy => {
    const s = result.scenarios.find((x) => x.name === name);
    if (!s) throw new Error(`no scenario ${name}`);
    return s;
  };

  beforeAll(() => {
    result = runAccuracy({ scale: 'tiny', seed: 42 });
  });

  it('runs every scenario through every algorithm at tiny scale', () => {
    expect(result.scenarios.map((s) => s.name)).toEqual([
      'spec-example',
      'steady-over',
      'boundary-burst',
      'pareto-sources',
      'retry-storm',
      'burst-then-steady',
    ]);
    for (const s of result.scenarios) expect(Object.keys(s.algorithms)).toEqual(MODES.map((m) => m.name));
    for (const s of result.scenarios) {
      for (const r of Object.values(s.algorithms)) {
        expect(r.requests).toBeGreaterThan(0);
        expect(r.admitted).toBeLessThanOrEqual(r.requests);
      }
    }
  });

  it('admits exactly 30 of 60 requests at 1 per second against 5 per 10 s with the sliding window', () => {
    const r = scenario('spec-example').algorithms.sliding_window;
    expect(r.requests).toBe(60);
    expect(r.admitted).toBe(30);
  });

  it('lets the fixed window admit 2 L in one window at a boundary burst', () => {
    expect(scenario('boundary-burst').algorithms.fixed_window.worstWindowRatio).toBeGreaterThanOrEqual(2);
  });

  it('never lets the sliding log admit more than L in any window', () => {
    for (const s of result.scenarios) expect(s.algorithms.sliding_log.worstWindowRatio).toBeLessThanOrEqual(1);
  });

  it('finds no wrong decision for the sliding log, which is its own reference', () => {
    for (const s of result.scenarios) {
      expect(s.algorithms.sliding_log.wronglyAdmitted).toBe(0);
      expect(s.algorithms.sliding_log.wronglyDenied).toBe(0);
      expect(s.algorithms.sliding_log.meanRateError).toBe(0);
    }
  });

  it('keeps the sliding window well below the fixed window worst case at a boundary burst', () => {
    const s = scenario('boundary-burst').algorithms;
    expect(s.sliding_window.worstWindowRatio).toBeLessThan(s.fixed_window.worstWindowRatio);
  });

  it('never lets the strict sliding window admit more than L in any window, and never judges it to admit wrongly', () => {
    for (const s of result.scenarios) {
      const strict = s.algorithms['sliding_window sub_windows=10 strict'];
      expect(strict.worstWindowRatio).toBeLessThanOrEqual(1);
      expect(strict.wronglyAdmitted).toBe(0);
    }
  });

  it('shows the default sliding window admitting close to 2 L in one window after a burst at a window end', () => {
    const s = scenario('burst-then-steady').algorithms;
    expect(s.sliding_window.worstWindowRatio).toBeGreaterThan(1.9);
    expect(s['sliding_window sub_windows=10'].worstWindowRatio).toBeLessThan(s.sliding_window.worstWindowRatio);
  });

  it('finds the buckets deciding exactly as their definitions, the token bucket admitting its burst on top of the rate', () => {
    for (const s of result.scenarios) {
      for (const name of ['token_bucket burst=L', 'leaky_bucket burst=L/10']) {
        expect(s.algorithms[name].wronglyAdmitted + s.algorithms[name].wronglyDenied).toBe(0);
      }
    }
    expect(scenario('burst-then-steady').algorithms['token_bucket burst=L'].worstWindowRatio).toBeGreaterThan(1.9);
  });

  it('gives the same numbers for the same seed', () => {
    const again = runAccuracy({ scale: 'tiny', seed: 42 });
    expect(again).toEqual(result);
  });

  it('scores a decision against the history the algorithm itself admitted', () => {
    // Two requests per second against 1 per second: an exact limiter admits every other one,
    // and the fixed window (which agrees with it here) is never judged wrong.
    const trace = {
      name: 'pairs',
      description: '',
      limit: 1,
      windowMs: 1000,
      sources: 1,
      drive(_r: unknown, offer: (s: number, t: number, h: number) => boolean) {
        for (let t = 0; t < 10_000; t += 500) offer(0, t, 1);
      },
    };
    const r = replay(trace, 'fixed_window', 1);
    expect(r.admitted).toBe(10);
    expect(r.wronglyAdmitted + r.wronglyDenied).toBe(0);
    expect(r.worstWindowRatio).toBe(1);
  });

  it('sizes the full scale larger than the tiny one', () => {
    const tiny = scenarios('tiny');
    const full = scenarios('full');
    expect(full.map((s) => s.name)).toEqual(tiny.map((s) => s.name));
    expect(full.find((s) => s.name === 'pareto-sources')!.sources).toBeGreaterThan(tiny.find((s) => s.name === 'pareto-sources')!.sources);
  });
});
