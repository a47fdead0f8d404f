/** The timers the Redis store's batcher and health probe run on: Node's in production, a fake clock in unit tests. */
export interface Timers {
  /** Calls `fn(arg)` after `ms`; the handle cancels it. */
  setTimeout<A>(fn: (arg: A) => void, ms: number, arg: A): unknown;
  /** Cancels a pending setTimeout (a handle already run or cancelled is ignored). */
  clearTimeout(handle: unknown): void;
  /** Calls `fn(arg)` once this loop turn's I/O has been read (Node: after the poll phase). */
  setImmediate<A>(fn: (arg: A) => void, arg: A): void;
}

/** Node's timers; `unref` timers do not keep the process alive (the health probe's). */
export function nodeTimers(options: { readonly unref: boolean }): Timers {
  return {
    setTimeout: options.unref ? (fn, ms, arg) => setTimeout(fn, ms, arg).unref() : (fn, ms, arg) => setTimeout(fn, ms, arg),
    clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
    setImmediate: (fn, arg) => void setImmediate(fn, arg),
  };
}
