// Lint: correctness and the import boundaries of the source tree, nothing of taste (formatting is
// prettier's: `make format`). docs/architecture.md explains the layers; this is where they are enforced.
const fs = require('node:fs');
const path = require('node:path');
const js = require('@eslint/js');
const tseslint = require('typescript-eslint');
const importX = require('eslint-plugin-import-x');

/**
 * One zone per folder of src/ (and per loose file of its root): what each may import besides itself.
 * Inner layers first; nothing may import a layer listed after it unless named here. Every folder of src/
 * must have an entry: a new folder without one stops lint, so each new folder states its place.
 * - the core (limiter) imports nothing outward;
 * - codecs (wire) know no transport; the HTTP/2 engine (http2) knows no gRPC;
 * - edges (grpc, http, xds, cli) never import each other; only app/ and main.ts compose them.
 */
const ZONES = {
  limiter: [],
  // One limit divided among members by demand (leases, quota budgets, and whatever shares next): on the core only.
  sharing: ['limiter'],
  settings: ['limiter', 'sharing'],
  'errors.ts': ['limiter'],
  'log.ts': ['settings'],
  config: ['limiter', 'settings'],
  store: ['limiter', 'settings', 'log.ts'],
  wire: ['limiter', 'errors.ts', 'sharing'],
  http2: [],
  tracing: ['settings', 'log.ts'],
  top: ['limiter'],
  service: ['limiter', 'errors.ts', 'log.ts', 'wire', 'tracing', 'sharing'],
  metrics: ['limiter', 'errors.ts', 'settings', 'service', 'sharing'],
  grpc: ['limiter', 'errors.ts', 'settings', 'log.ts', 'wire', 'http2', 'service', 'tracing'],
  http: ['limiter', 'sharing', 'errors.ts', 'log.ts', 'wire', 'service', 'metrics', 'config', 'top'],
  xds: ['limiter', 'settings', 'log.ts', 'config', 'wire', 'service'],
  cli: ['limiter', 'settings', 'config', 'wire'],
  app: ['limiter', 'sharing', 'errors.ts', 'settings', 'log.ts', 'config', 'store', 'wire', 'http2', 'tracing', 'top', 'service', 'metrics', 'grpc', 'http'],
  // The composition root and the command line see everything.
  'main.ts': null,
  'cli.ts': null,
};

const SRC = path.join(__dirname, 'src');
const unzoned = fs.readdirSync(SRC).filter((name) => !(name in ZONES));
if (unzoned.length > 0) {
  throw new Error(`src/${unzoned.join(', src/')}: no lint zone; add it to ZONES in eslint.config.js (and its line to docs/architecture.md)`);
}
const zones = Object.entries(ZONES)
  .filter(([, allowed]) => allowed !== null)
  .map(([name, allowed]) => ({
    target: `./src/${name}`,
    from: './src',
    except: [name, ...allowed].map((n) => `./${n}`),
    message: `src/${name} may import only ${allowed.length === 0 ? 'itself' : allowed.map((n) => `src/${n}`).join(', ')} (docs/architecture.md)`,
  }));

/**
 * import-x/no-cycle skips `import type`, so files that only name each other's types could form a
 * circle it never reports (the core's domain types, Store port and reservations once did). This rule
 * follows every relative import and re-export of src/, types included, and reports the import that
 * leads back to the file it is in.
 */
const importsOf = new Map();
const RELATIVE_IMPORT = /^(?:import|export)\b[^;]*?\sfrom\s+'(\.[^']+)'/gm;
function resolveTs(base) {
  for (const candidate of [`${base}.ts`, path.join(base, 'index.ts')]) if (fs.existsSync(candidate)) return candidate;
  return undefined;
}
function relativeImports(file) {
  const mtimeMs = fs.statSync(file).mtimeMs;
  const known = importsOf.get(file);
  if (known !== undefined && known.mtimeMs === mtimeMs) return known.deps;
  const deps = [];
  for (const m of fs.readFileSync(file, 'utf8').matchAll(RELATIVE_IMPORT)) {
    const target = resolveTs(path.resolve(path.dirname(file), m[1]));
    if (target !== undefined) deps.push(target);
  }
  importsOf.set(file, { mtimeMs, deps });
  return deps;
}
function reaches(from, target) {
  const seen = new Set([from]);
  const todo = [from];
  while (todo.length > 0) {
    for (const next of relativeImports(todo.pop())) {
      if (next === target) return true;
      if (!seen.has(next)) {
        seen.add(next);
        todo.push(next);
      }
    }
  }
  return false;
}
const noTypeCycle = {
  meta: {
    type: 'problem',
    schema: [],
    messages: { cycle: 'imports {{target}}, which imports this file back (type imports included): break the circle' },
  },
  create(context) {
    const file = path.resolve(context.filename);
    const check = (node) => {
      const spec = node.source?.value;
      if (typeof spec !== 'string' || !spec.startsWith('.')) return;
      const target = resolveTs(path.resolve(path.dirname(file), spec));
      if (target !== undefined && (target === file || reaches(target, file))) {
        context.report({ node, messageId: 'cycle', data: { target: path.relative(__dirname, target) } });
      }
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

module.exports = tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '*.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [importX.createNodeResolver({ extensions: ['.ts', '.js', '.json', '.node'] })],
      'import-x/extensions': ['.ts', '.js'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
    },
    rules: {
      // tsc (noUnusedLocals, noUnusedParameters) reports unused code; one report is enough.
      '@typescript-eslint/no-unused-vars': 'off',
      'no-unused-vars': 'off',
      // Decoded wire messages and test doubles need `any` at a few edges; tsc strict covers the rest.
      '@typescript-eslint/no-explicit-any': 'off',
      // Taste, not correctness.
      'no-regex-spaces': 'off',
      'prefer-const': 'off',
      // Flag enums (HTTP/2 frame flags) share values by design.
      '@typescript-eslint/no-duplicate-enum-values': 'off',
      'import-x/no-cycle': 'error',
    },
  },
  {
    files: ['src/**/*.ts'],
    plugins: { local: { rules: { 'no-type-cycle': noTypeCycle } } },
    rules: {
      'import-x/no-restricted-paths': ['error', { zones }],
      'local/no-type-cycle': 'error',
    },
  },
  {
    files: ['src/limiter/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['ioredis', '@grpc/*', 'protobufjs', 'protobufjs/*', 'yaml', 'pino', 'pino-*', 'prom-client', 'hot-shots'],
              message: 'the core never sees the wire, Redis, YAML or telemetry libraries',
            },
            {
              group: ['node:fs', 'node:fs/*', 'node:net', 'node:http', 'node:http2', 'node:tls', 'fs', 'net', 'http', 'http2', 'tls'],
              message: 'the core does no I/O',
            },
          ],
        },
      ],
    },
  },
);
