import { StoreUnavailableError, type CounterRequest } from '../../limiter/store';
import { counterProblem, counterSpec } from './script';

/**
 * One call of a script that decides counters beside a structure of its own (RESERVE, SETTLE: see
 * DECIDE_BESIDE in ./script.ts), outside the batcher: its counters' keys and specs, the call under a
 * deadline, the reply read.
 */
export interface BesideCallOptions {
  /** Sends the script: [numkeys, ...keys, ...argv]. */
  readonly call: (args: (string | number)[]) => Promise<unknown>;
  /** A counter's Redis key (the store's keyOf). */
  readonly keyOf: (c: CounterRequest) => string;
  /** Deadline of one call, ms. */
  readonly timeoutMs: number;
  /** A failed call, for metrics and the health probe; returns the error to reject with. */
  readonly failed: (err: unknown) => Error;
}

/** The counters' keys and DECIDE specs (each counter as `specOf` gives it), or the first counter's problem. */
export function counterArguments(
  counters: readonly CounterRequest[],
  keyOf: (c: CounterRequest) => string,
  specOf: (c: CounterRequest) => CounterRequest = (c) => c,
): { readonly keys: string[]; readonly specs: string[] } | Error {
  const keys: string[] = [];
  const specs: string[] = [];
  for (const c of counters) {
    const problem = counterProblem(c);
    if (problem !== undefined) return new Error(`counter ${JSON.stringify(c.key)}: ${problem}`);
    keys.push(keyOf(c));
    specs.push(counterSpec(specOf(c)));
  }
  return { keys, specs };
}

/** Sends `args` and reads the reply with `read`; rejects through `failed` on an error, a malformed reply or the deadline. */
export function callBeside<T>(options: BesideCallOptions, args: (string | number)[], read: (reply: unknown) => T): Promise<T> {
  const deadlineMs = options.timeoutMs;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(options.failed(new StoreUnavailableError(`redis did not answer within ${deadlineMs} ms`))), deadlineMs);
    options.call(args).then(
      (reply) => {
        clearTimeout(timer);
        try {
          resolve(read(reply));
        } catch (err) {
          reject(options.failed(err));
        }
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(options.failed(err));
      },
    );
  });
}
