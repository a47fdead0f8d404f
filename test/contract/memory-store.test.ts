import { MemoryExchange } from '../../src/store/memory-exchange';
import { MemoryStore } from '../../src/store/memory-store';
import { FakeClock } from '../helpers/fake-clock';
import { describeStoreContract } from './store-contract';

describeStoreContract('memory', async () => {
  // An arbitrary, non-aligned start: nothing may depend on time starting at a window boundary.
  const clock = new FakeClock(1_700_000_123_457);
  const store = new MemoryStore({ clock, maxKeys: 100_000, sweepIntervalMs: 0 });
  return {
    store,
    exchange: new MemoryExchange({ clock }),
    advance: async (ms: number) => clock.advance(ms),
    nowMs: () => clock.nowMs(),
    close: () => store.close(),
  };
});
