import { MemoryExchange } from '../../src/store/memory-exchange';
import { MemoryStore } from '../../src/store/memory-store';
import { FakeClock } from '../helpers/fake-clock';
import { CONTRACT_RESERVATION_KEY_BYTES, CONTRACT_RESERVATION_TTL_MS, CONTRACT_RESERVATIONS_PER_KEY } from './reservation-contract';
import { describeStoreContract } from './store-contract';

describeStoreContract('memory', async () => {
  // An arbitrary, non-aligned start: nothing may depend on time starting at a window boundary.
  const clock = new FakeClock(1_700_000_123_457);
  const store = new MemoryStore({
    clock,
    maxKeys: 100_000,
    sweepIntervalMs: 0,
    reservations: { ttlMs: CONTRACT_RESERVATION_TTL_MS, maxPerKey: CONTRACT_RESERVATIONS_PER_KEY, maxKeyBytes: CONTRACT_RESERVATION_KEY_BYTES },
  });
  return {
    store,
    exchange: new MemoryExchange({ clock }),
    advance: async (ms: number) => clock.advance(ms),
    nowMs: () => clock.nowMs(),
    close: () => store.close(),
  };
});
