import { performance } from 'node:perf_hooks';
import { parseDocument } from 'yaml';
import { parseConfigText } from '../../../src/config/rule-reader';
import { ConfigError } from '../../../src/config/config-error';
import { checkYamlBounds } from '../../../src/config/yaml-bounds';
import { metadataAliasBomb, ruleAliasBomb } from '../../helpers/yaml-bombs';

const opts = { defaultAlgorithm: 'sliding_window' } as const;

/** The ConfigError `read` throws, and how long it took. */
function refusal(read: () => unknown): { error: ConfigError; ms: number } {
  const start = performance.now();
  try {
    read();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return { error: err, ms: performance.now() - start };
  }
  throw new Error('expected a ConfigError');
}

const bounds = (text: string) => () => checkYamlBounds('f.yaml', parseDocument(text, { version: '1.1' }));

describe('a config file cannot make the loader read without bound', () => {
  test('an alias bomb in metadata is refused at once, naming the file and the alias that crossed the bound', () => {
    const { error, ms } = refusal(() => parseConfigText('bomb.yaml', metadataAliasBomb(), opts));
    expect(error.file).toBe('bomb.yaml');
    expect(error.message).toMatch(/^bomb\.yaml: descriptors\[0\]\.metadata\.l\d\[\d\]: aliases expand to more than 100000 nodes \(at \*a\d\)$/);
    expect(ms).toBeLessThan(250);
  });

  test('an alias bomb under a key the reference ignores is refused too', () => {
    // `name` is a reference key with no meaning on a rule: read only to check what it holds.
    const lines = ['domain: edge', 'descriptors:', '  - key: user', '    name:', '      descriptors:', '        - &a0 {key: x}'];
    for (let i = 1; i < 10; i++)
      lines.push(
        `        - &a${i} {descriptors: [${Array(10)
          .fill(`*a${i - 1}`)
          .join(', ')}]}`,
      );
    const text = lines.join('\n') + '\n';
    expect(refusal(() => parseConfigText('bomb.yaml', text, opts)).error.detail).toMatch(/^aliases expand to more than 100000 nodes/);
  });

  test('rule lists that alias each other, every rule distinct, are refused before any rule is built', () => {
    const { error, ms } = refusal(() => parseConfigText('rules.yaml', ruleAliasBomb(), opts));
    expect(error.message).toMatch(/^rules\.yaml: descriptors\[\d\]\.descriptors\[\d\]\.descriptors: aliases expand to more than 100000 nodes \(at \*r\d\)$/);
    expect(ms).toBeLessThan(250);
  });

  test('nesting deeper than 128 levels is refused with the path where it crossed', () => {
    const text = `domain: edge\ndescriptors:\n  - key: user\n    metadata:\n      deep: ${'['.repeat(200)}${']'.repeat(200)}\n`;
    const { error, ms } = refusal(() => parseConfigText('deep.yaml', text, opts));
    expect(error.message).toMatch(/^deep\.yaml: descriptors\[0\]\.metadata\.deep(\[0\])+: nested deeper than 128 levels \(aliases expanded\)$/);
    expect(ms).toBeLessThan(250);
  });

  test('depth is counted through aliases', () => {
    const shared = `a: &d ${'['.repeat(70)}${']'.repeat(70)}\n`;
    expect(refusal(bounds(`${shared}b: ${'['.repeat(60)}*d${']'.repeat(60)}\n`)).error.detail).toBe('nested deeper than 128 levels (aliases expanded)');
    expect(bounds(`${shared}b: ${'['.repeat(50)}*d${']'.repeat(50)}\n`)).not.toThrow();
  });

  test('the aliases of a file may add 100,000 nodes, not one more', () => {
    // An anchor of 1,000 nodes (a list of 999 scalars) named 100 times adds exactly 100,000.
    const text = (times: number) => `a: &big [${Array(999).fill('x').join(', ')}]\nb: [${Array(times).fill('*big').join(', ')}]\n`;
    expect(bounds(text(100))).not.toThrow();
    expect(refusal(bounds(text(101))).error.message).toBe('f.yaml: b[100]: aliases expand to more than 100000 nodes (at *big)');
  });

  test('an alias inside the node it names is refused, not followed', () => {
    expect(refusal(bounds('a: &loop [x, *loop]\n')).error.detail).toMatch(/^alias \*loop refers to a node that contains it/);
  });

  test('a config that shares blocks through aliases and merge keys within the bounds loads', () => {
    const rules = Array.from({ length: 1000 }, (_, i) => `  - {key: user, value: u${i}, rate_limit: *standard, metadata: {<<: *meta, n: ${i}}}`);
    const text = [
      'domain: edge',
      'descriptors:',
      '  - {key: plan, rate_limit: &standard {unit: minute, requests_per_unit: 10}, metadata: &meta {team: a}}',
      ...rules,
    ].join('\n');
    const config = parseConfigText('shared.yaml', text, opts);
    expect(config.rules.get('user')?.exact.size).toBe(1000);
    expect(config.rules.get('user')?.exact.get('u7')?.metadata).toEqual({ n: 7, team: 'a' });
  });
});
