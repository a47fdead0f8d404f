import { EventEmitter } from 'node:events';
import type { Worker } from 'node:cluster';
import { silentLogger } from '../../../src/log';
import { superviseWorkers, WORKER_INDEX_ENV, WORKER_READY } from '../../../src/app/workers';

/** A forked worker as the supervisor sees it: messages, exit, and its process. */
class FakeWorker extends EventEmitter {
  static nextPid = 1000;
  /** A kill is only recorded: the process would exit later, which the test then says with die(). */
  readonly process = { pid: FakeWorker.nextPid++, kill: (signal: string) => void this.killedWith.push(signal) };
  readonly killedWith: string[] = [];
  connected = true;
  constructor(readonly env: Readonly<Record<string, string>>) {
    super();
  }
  isConnected(): boolean {
    return this.connected;
  }
  send(): boolean {
    return true;
  }
  ready(): void {
    this.emit('message', WORKER_READY);
  }
  die(code: number | null, signal: string | null): void {
    this.connected = false;
    this.emit('exit', code, signal);
  }
}

function supervise(workers: number) {
  const forked: FakeWorker[] = [];
  const exits: number[] = [];
  superviseWorkers({
    workers,
    logger: silentLogger(),
    shutdownGraceMs: 1_000,
    exit: (code) => exits.push(code),
    fork: (env) => {
      const w = new FakeWorker(env);
      forked.push(w);
      return w as unknown as Worker;
    },
    handleSignals: false,
  });
  return { forked, exits };
}

describe('superviseWorkers', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('stops everything and exits 1 when a worker exits on its own before it was ready (a start-up failure)', () => {
    const { forked, exits } = supervise(2);
    forked[0].ready();
    forked[1].die(1, null);
    // The other worker is asked to stop; the supervisor exits once it has, and starts nothing new.
    expect(forked[0].killedWith).toEqual(['SIGTERM']);
    expect(exits).toEqual([]);
    forked[0].die(null, 'SIGTERM');
    expect(exits).toEqual([1]);
    jest.advanceTimersByTime(10_000);
    expect(forked).toHaveLength(2);
  });

  it('restarts a worker killed by a signal, ready or not: a kill says nothing about the config', () => {
    const { forked, exits } = supervise(2);
    forked[0].ready();
    forked[1].die(null, 'SIGKILL');
    jest.advanceTimersByTime(5_000);
    expect(forked).toHaveLength(3);
    forked[0].die(null, 'SIGKILL');
    jest.advanceTimersByTime(5_000);
    expect(forked).toHaveLength(4);
    expect(exits).toEqual([]);
  });

  it("gives each worker an index, and a worker started again its predecessor's (its name among the replicas)", () => {
    const { forked } = supervise(3);
    expect(forked.map((w) => w.env[WORKER_INDEX_ENV])).toEqual(['0', '1', '2']);
    forked.forEach((w) => w.ready());
    forked[1].die(null, 'SIGKILL');
    jest.advanceTimersByTime(5_000);
    forked[0].die(1, null);
    jest.advanceTimersByTime(5_000);
    expect(forked.slice(3).map((w) => w.env[WORKER_INDEX_ENV])).toEqual(['1', '0']);
  });

  it('restarts a ready worker that crashes, backing off when crashes follow each other', () => {
    const { forked, exits } = supervise(1);
    forked[0].ready();
    forked[0].die(1, null);
    jest.advanceTimersByTime(199);
    expect(forked).toHaveLength(1);
    jest.advanceTimersByTime(1);
    expect(forked).toHaveLength(2);
    expect(exits).toEqual([]);
  });
});
