/**
 * A small seeded pseudo-random generator, so every synthetic trace is reproducible from its seed.
 * Quality needs are modest (traffic shapes, not cryptography): a 32-bit splitmix-style mixer is enough.
 */

export interface Random {
  /** Uniform in [0, 1). */
  next(): number;
  /** Exponential with the given mean (inter-arrival times of a Poisson process). */
  exponential(mean: number): number;
  /** Pareto with scale xm and shape alpha (heavy tail: a few sources carry most of the traffic). */
  pareto(xm: number, alpha: number): number;
  /** Integer in [0, n). */
  int(n: number): number;
}

/** Creates a generator whose sequence depends only on `seed`. */
export function createRandom(seed: number): Random {
  let state = seed >>> 0 || 0x9e3779b9;
  const next = (): number => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    z = (z ^ (z >>> 16)) >>> 0;
    return z / 4294967296;
  };
  // 1 - next() is in (0, 1], so the logarithm and the power never see zero.
  return {
    next,
    exponential: (mean) => -Math.log(1 - next()) * mean,
    pareto: (xm, alpha) => xm / Math.pow(1 - next(), 1 / alpha),
    int: (n) => Math.floor(next() * n),
  };
}
