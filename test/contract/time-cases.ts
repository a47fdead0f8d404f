/**
 * The contract's cases that wait for real time to pass (on Redis: window roll-overs and TTLs, seconds
 * each) are registered through a `TimeCase`: `it` where they run, nothing where the suite leaves
 * them out (see ContractOptions in ./store-contract.ts).
 */
export type TimeCase = (name: string, fn: () => Promise<void>) => void;

/** `it` when `run`, else a registration that adds no case. */
export function timeCases(run: boolean): TimeCase {
  return run ? (name, fn) => it(name, fn) : () => undefined;
}
