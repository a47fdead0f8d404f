const os = require('node:os');

/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    // Type checking runs once in `make test` (tsc, with noUnused*); jest only transpiles.
    '^.+\\.ts$': ['ts-jest', { isolatedModules: true }],
  },
  testTimeout: 30000,
  // Most test files wait (on timers, child processes, redis-server, real windows) more than they
  // compute: half again as many workers as cores, three on two (jest's default is one fewer than the
  // cores). A number, as jest reads a percentage over 100 as a count of workers.
  maxWorkers: Math.ceil(1.5 * os.availableParallelism()),
  // Without cached timings, the files that wait on real time start before the quick unit files.
  testSequencer: '<rootDir>/jest.sequencer.js',
  // With --coverage (as `make test` runs it): a report of src/, and a floor for the core. Integration
  // tests drive dist/ in child processes, so only in-process tests count here.
  collectCoverageFrom: ['src/**/*.ts', '!src/**/*.generated.ts'],
  coverageReporters: ['text-summary', 'lcov'],
  coverageThreshold: {
    './src/limiter/': { statements: 90, branches: 85, functions: 90, lines: 90 },
  },
};
