import type { EnvoyQuotaClient } from './envoy-quota-client';

/**
 * Offered load for quota clients: each proxy sends requests into one bucket at a steady rate (in
 * 10 ms steps), and every admitted request's time is kept, so tests can count what was admitted in
 * any window.
 */

export interface Offer {
  readonly proxy: EnvoyQuotaClient;
  readonly bucket: Record<string, string>;
  /** Requests per second. */
  readonly rate: number;
}

export interface OfferLog {
  /** Per offer: times (ms, performance.now()) of admitted requests. */
  readonly admitted: number[][];
  /** Per offer: requests sent. */
  readonly sent: number[];
  readonly startMs: number;
}

const STEP_MS = 10;

/** Drives every offer for `durationMs`; resolves with what each admitted and sent. */
export function driveLoad(offers: readonly Offer[], durationMs: number): Promise<OfferLog> {
  const startMs = performance.now();
  const admitted = offers.map(() => [] as number[]);
  const sent = offers.map(() => 0);
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      const now = performance.now();
      const elapsed = Math.min(now - startMs, durationMs);
      offers.forEach((o, i) => {
        const due = Math.floor((o.rate * elapsed) / 1000) - sent[i];
        for (let k = 0; k < due; k++) {
          sent[i]++;
          if (o.proxy.request(o.bucket)) admitted[i].push(now);
        }
      });
      if (now - startMs >= durationMs) {
        clearInterval(timer);
        resolve({ admitted, sent, startMs });
      }
    }, STEP_MS);
  });
}

/** Admitted requests (of the offers named, all by default) in [fromMs, toMs) after the start. */
export function admittedBetween(log: OfferLog, fromMs: number, toMs: number, which: readonly number[] = log.admitted.map((_, i) => i)): number {
  let n = 0;
  for (const i of which) for (const t of log.admitted[i]) if (t - log.startMs >= fromMs && t - log.startMs < toMs) n++;
  return n;
}

/** The fewest and most requests admitted in any window of `windowMs` starting every `stepMs` within [fromMs, toMs). */
export function windowExtremes(log: OfferLog, windowMs: number, fromMs: number, toMs: number, stepMs = 100): { min: number; max: number } {
  let min = Infinity;
  let max = -Infinity;
  for (let at = fromMs; at + windowMs <= toMs; at += stepMs) {
    const n = admittedBetween(log, at, at + windowMs);
    min = Math.min(min, n);
    max = Math.max(max, n);
  }
  return { min, max };
}
