// Lint: correctness and the import boundaries of the source tree, nothing of taste (formatting is
// prettier's: `make format`). Boundaries, with src/limiter the core:
//   src/limiter   imports nothing outside itself (no config loading, stores, settings, wire, I/O libraries)
//   settings.ts   imports the core (and reference-settings.ts, which imports nothing); errors.ts (the error catalogue) the core only
//   src/config    the core and settings.ts
//   src/store     the core, settings.ts and log.ts
//   src/server    never the stores, the config loader, metrics or the composition root
// Each layer only looks inward, so folders cannot form a cycle; import-x/no-cycle also rejects
// cycles between single files.
const js = require('@eslint/js');
const tseslint = require('typescript-eslint');
const importX = require('eslint-plugin-import-x');

const ROOT_MODULES = ['./src/main.ts', './src/cli.ts', './src/warm-up.ts', './src/workers.ts', './src/metrics.ts', './src/metric-tallies.ts'];

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
    rules: {
      'import-x/no-restricted-paths': [
        'error',
        {
          zones: [
            { target: './src/limiter', from: './src', except: ['./limiter'], message: 'the core (src/limiter) imports nothing outside itself' },
            {
              target: './src/config',
              from: './src',
              except: ['./config', './limiter', './settings.ts'],
              message: 'src/config depends on the core and settings only',
            },
            {
              target: './src/settings.ts',
              from: './src',
              except: ['./limiter', './settings.ts', './reference-settings.ts'],
              message: 'settings.ts depends on the core and the reference settings table only',
            },
            {
              target: './src/reference-settings.ts',
              from: './src',
              except: ['./reference-settings.ts'],
              message: 'the reference settings table imports nothing',
            },
            { target: './src/errors.ts', from: './src', except: ['./limiter', './errors.ts'], message: 'the error catalogue depends on the core only' },
            {
              target: './src/store',
              from: './src',
              except: ['./store', './limiter', './settings.ts', './log.ts'],
              message: 'stores depend on the core, settings and the logger only',
            },
            {
              target: './src/server',
              from: ['./src/store', './src/config', './src/cli', ...ROOT_MODULES],
              message: 'edges reach stores and config through the core and the composition root (main.ts)',
            },
          ],
        },
      ],
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
