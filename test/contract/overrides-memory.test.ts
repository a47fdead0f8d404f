import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MemoryOverrides } from '../../src/store/memory-overrides';
import { describeOverridesContract } from './overrides-contract';

describeOverridesContract('memory', async () => {
  const opened: MemoryOverrides[] = [];
  return {
    fresh: async ({ rememberedRemovals }) => {
      const store = await MemoryOverrides.open({ rememberedRemovals });
      opened.push(store);
      return { store, peer: store };
    },
    close: async () => {
      await Promise.all(opened.map((s) => s.close()));
    },
  };
});

describeOverridesContract('memory with OVERRIDES_FILE', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-overrides-'));
  const opened: MemoryOverrides[] = [];
  let n = 0;
  return {
    fresh: async ({ rememberedRemovals }) => {
      const store = await MemoryOverrides.open({ file: path.join(dir, `overrides-${n++}.ndjson`), rememberedRemovals });
      opened.push(store);
      return { store, peer: store };
    },
    close: async () => {
      await Promise.all(opened.map((s) => s.close()));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});
