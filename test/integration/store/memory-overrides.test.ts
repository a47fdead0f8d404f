import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { OverrideWrite } from '../../../src/limiter/overrides-store';
import { MemoryOverrides, OverridesFileError } from '../../../src/store/memory-overrides';

/** OVERRIDES_FILE: the memory store's overrides across restarts (the port's behaviour is test/contract/overrides-contract.ts). */

const NOW = 1_800_000_000_000;
const write = (id: string, json: string, expiresAtMs?: number): OverrideWrite => ({
  id,
  json,
  expiresAtMs,
  nowMs: NOW,
  maxCount: 1_000_000,
  maxBytes: 1 << 30,
});

describe('the memory overrides with OVERRIDES_FILE', () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-overrides-file-'));
    file = path.join(dir, 'overrides.ndjson');
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('keeps every override, removal and expiry across a restart, and numbers on from where it was', async () => {
    const first = await MemoryOverrides.open({ file });
    await first.put(write('a', '"a1"'));
    await first.put(write('b', '"b1"', NOW + 60_000));
    await first.put(write('a', '"a2"'));
    await first.put(write('c', '"c1"'));
    await first.remove('c', NOW);
    await first.close();

    const again = await MemoryOverrides.open({ file });
    expect(await again.version()).toBe(5);
    const all = await again.changes(0, 100);
    expect(all.changed).toEqual([
      { id: 'b', version: 2, json: '"b1"' },
      { id: 'a', version: 3, json: '"a2"' },
    ]);
    // The expiry was kept with it.
    expect(await again.purgeExpired(NOW + 60_000, 10)).toEqual([{ version: 6, previous: { id: 'b', version: 2, json: '"b1"' } }]);
    await again.close();
  });

  it('leaves out a last line cut short by a crash, and refuses a file with a bad line elsewhere, naming the line', async () => {
    const first = await MemoryOverrides.open({ file });
    await first.put(write('a', '"a1"'));
    await first.close();
    fs.appendFileSync(file, '{"op":"put","id":"b","vers');
    const again = await MemoryOverrides.open({ file });
    expect((await again.changes(0, 10)).changed.map((c) => c.id)).toEqual(['a']);
    await again.close();

    fs.writeFileSync(file, '{"op":"version","version":3}\nnot json\n{"op":"put","id":"a","version":4,"json":"1"}\n');
    const opening = MemoryOverrides.open({ file });
    await expect(opening).rejects.toThrow(OverridesFileError);
    await expect(opening).rejects.toThrow(`OVERRIDES_FILE ${file}: line 2: not an override line`);
  });

  it('rewrites the file once it is mostly replaced lines, keeping what is live', async () => {
    const store = await MemoryOverrides.open({ file });
    for (let i = 0; i < 3_000; i++) await store.put(write(`id${i % 10}`, `"${i}"`));
    const lines = fs.readFileSync(file, 'utf8').split('\n').length - 1;
    // 3,000 writes of 10 overrides: rewritten whenever past 2 x 10 + 1,000 lines.
    expect(lines).toBeLessThanOrEqual(2 * 10 + 1_000 + 1);
    await store.close();
    const again = await MemoryOverrides.open({ file });
    const all = await again.changes(0, 100);
    expect(all.version).toBe(3_000);
    expect(all.changed.map((c) => c.json).sort()).toEqual(Array.from({ length: 10 }, (_, i) => `"${2_990 + i}"`).sort());
    await again.close();
  });

  it('fails to open naming OVERRIDES_FILE when it cannot be read', async () => {
    fs.mkdirSync(file);
    await expect(MemoryOverrides.open({ file })).rejects.toThrow(`OVERRIDES_FILE ${file}`);
  });
});
