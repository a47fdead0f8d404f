import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AdminTokens, AdminTokensError } from '../../../src/http/admin-tokens';
import { startTestService } from '../../helpers/service';

/** ADMIN_TOKENS_FILE read (src/http/admin-tokens.ts): the lines it takes, the ones that stop the start, and the check of a header. */

describe('ADMIN_TOKENS_FILE', () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-admin-tokens-'));
    file = path.join(dir, 'tokens');
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('names the token a bearer header carries, and nothing for any other header', () => {
    fs.writeFileSync(file, '# who may change overrides\n\nalice  aaaaaaaaaaaaaaaa-1\nci.bot@example bbbbbbbbbbbbbbbb-2  \n');
    const tokens = AdminTokens.load(file);
    expect(tokens.names).toEqual(['alice', 'ci.bot@example']);
    expect(tokens.check('Bearer aaaaaaaaaaaaaaaa-1')).toBe('alice');
    expect(tokens.check('bearer bbbbbbbbbbbbbbbb-2')).toBe('ci.bot@example');
    for (const header of [
      undefined,
      '',
      'Bearer',
      'Bearer aaaaaaaaaaaaaaaa-',
      'Basic aaaaaaaaaaaaaaaa-1',
      'aaaaaaaaaaaaaaaa-1',
      `Bearer ${'x'.repeat(10_000)}`,
    ]) {
      expect(tokens.check(header)).toBeUndefined();
    }
  });

  it.each([
    ['alice\n', 'line 1: expected NAME TOKEN'],
    ['alice short\n', 'line 1: a TOKEN is 16 to 4096 printable characters without spaces'],
    ['-alice aaaaaaaaaaaaaaaa\n', 'line 1: a NAME is 1 to 64 letters'],
    ['a aaaaaaaaaaaaaaaa\na bbbbbbbbbbbbbbbb\n', 'line 2: the name a is given twice'],
    ['a aaaaaaaaaaaaaaaa\nb aaaaaaaaaaaaaaaa\n', 'line 2: a token given twice'],
  ])('refuses %j naming the file and the line', (text, message) => {
    fs.writeFileSync(file, text);
    expect(() => AdminTokens.load(file)).toThrow(AdminTokensError);
    expect(() => AdminTokens.load(file)).toThrow(`ADMIN_TOKENS_FILE ${file}: ${message}`);
  });

  it('stops the start of the service naming it when it is missing or bad', async () => {
    await expect(startTestService({ config: { 'e.yaml': 'domain: e\n' }, env: { ADMIN_TOKENS_FILE: file } })).rejects.toThrow(
      `ADMIN_TOKENS_FILE ${file}: ENOENT`,
    );
    fs.writeFileSync(file, 'alice\n');
    await expect(startTestService({ config: { 'e.yaml': 'domain: e\n' }, env: { ADMIN_TOKENS_FILE: file } })).rejects.toThrow(
      `ADMIN_TOKENS_FILE ${file}: line 1: expected NAME TOKEN`,
    );
  });
});
