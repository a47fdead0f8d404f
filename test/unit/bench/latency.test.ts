import fc from 'fast-check';
import { LatencyHistogram, summarize, TIMEOUT_MS } from '../../../bench/latency';

describe('bench latency summaries', () => {
  it("count the calls slower than Envoy's 20 ms timeout, exactly, in both summaries", () => {
    const samples = [0.2, 5, 19.99, 20, 20.01, 35, 120];
    const h = new LatencyHistogram();
    for (const ms of samples) h.record(ms);
    expect(summarize(Float64Array.from(samples)).overTimeout).toBe(3);
    expect(h.summary().overTimeout).toBe(3);
    expect(summarize(new Float64Array(0)).overTimeout).toBe(0);
  });

  it('agree with a plain count on any samples', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ min: 0, max: 1_000, noNaN: true }), { maxLength: 200 }), (samples) => {
        const expected = samples.filter((ms) => ms > TIMEOUT_MS).length;
        const h = new LatencyHistogram();
        for (const ms of samples) h.record(ms);
        expect(summarize(Float64Array.from(samples)).overTimeout).toBe(expected);
        expect(h.summary().overTimeout).toBe(expected);
      }),
    );
  });
});
