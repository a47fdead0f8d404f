import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log';
import { descriptor, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';
import { metadataAliasBomb, ruleAliasBomb } from '../../helpers/yaml-bombs';

/**
 * Hot reload seen from a client of the running service: a rewritten file, a Kubernetes ConfigMap
 * update (the `..data` symlink swapped atomically, in Istio's RUNTIME_* layout) and a broken file
 * that must leave the previous limits serving.
 */

const limits = (perMinute: number): string => `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: ${perMinute}}
`;

const ask = (user: string): RlsRequestInput => ({ domain: 'edge', descriptors: [descriptor([['user', user]])] });

/** The limit the service reports for a fresh key; polls until `want` or the deadline. */
async function limitSeen(svc: TestService, want: number, deadlineMs = 4_000): Promise<number | undefined> {
  const until = Date.now() + deadlineMs;
  let seen: number | undefined;
  for (let i = 0; ; i++) {
    const reply = await svc.client.shouldRateLimit(ask(`probe-${want}-${i}`));
    seen = reply.statuses[0].currentLimit?.requestsPerUnit;
    if (seen === want || Date.now() >= until) return seen;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function rlconfig(svc: TestService): Promise<string> {
  return (await fetch(`http://127.0.0.1:${svc.service.debugPort}/rlconfig`)).text();
}

/** A logger of errors and the lines it wrote. */
function errorLog(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  return { lines, logger: createLogger({ level: 'error', format: 'json', destination }) };
}

describe('config reload in a running service', () => {
  it('applies a rewritten file within seconds', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': limits(5) } });
    try {
      expect(await limitSeen(svc, 5, 0)).toBe(5);
      svc.writeConfig('edge.yaml', limits(7));
      expect(await limitSeen(svc, 7)).toBe(7);
    } finally {
      await svc.stop();
    }
  });

  it('keeps serving the previous limits when the new file is invalid, and names the file and path', async () => {
    const { lines, logger } = errorLog();
    const svc = await startTestService({ config: { 'edge.yaml': limits(5) }, logger });
    try {
      svc.writeConfig('edge.yaml', 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: sec, requests_per_unit: 1}\n');
      // Wait past the debounce and poll period, then check that nothing changed.
      const until = Date.now() + 3_000;
      let failures = 0;
      while (Date.now() < until && failures === 0) {
        const text = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
        const line = text.split('\n').find((l) => l.startsWith('ratelimit_service_config_load_error '));
        failures = line === undefined ? 0 : Number(line.split(' ')[1]);
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(failures).toBeGreaterThan(0);
      expect(lines.join('')).toContain('edge.yaml: descriptors[0].rate_limit.unit: unknown unit \\"sec\\"');
      const reply = await svc.client.shouldRateLimit(ask('after-bad-write'));
      expect(reply.statuses[0].currentLimit?.requestsPerUnit).toBe(5);
      expect(await rlconfig(svc)).toContain('requests_per_unit=5');
      // A fixed file is picked up again.
      svc.writeConfig('edge.yaml', limits(9));
      expect(await limitSeen(svc, 9)).toBe(9);
    } finally {
      await svc.stop();
    }
  });

  it.each([
    ['aliases in metadata', metadataAliasBomb()],
    ['rule lists aliasing each other', ruleAliasBomb()],
  ])('refuses a file whose %s stand for billions of nodes at once, and keeps serving the previous limits', async (_shape, bomb) => {
    const { lines, logger } = errorLog();
    const svc = await startTestService({ config: { 'edge.yaml': limits(5) }, logger });
    try {
      svc.writeConfig('edge.yaml', bomb);
      const until = Date.now() + 3_000;
      let slowest = 0;
      while (Date.now() < until && !lines.join('').includes('aliases expand')) {
        const start = Date.now();
        const reply = await svc.client.shouldRateLimit(ask('during-reload'));
        slowest = Math.max(slowest, Date.now() - start);
        expect(reply.statuses[0].currentLimit?.requestsPerUnit).toBe(5);
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(lines.join('')).toMatch(/edge\.yaml: descriptors\[\d\][.\w[\]]*: aliases expand to more than 100000 nodes/);
      // Refusing it held the event loop for a moment, not for the minutes reading it would take.
      expect(slowest).toBeLessThan(500);
      expect((await svc.client.shouldRateLimit(ask('after-bomb'))).statuses[0].currentLimit?.requestsPerUnit).toBe(5);
      expect(await rlconfig(svc)).toContain('requests_per_unit=5');
    } finally {
      await svc.stop();
    }
  });

  it('follows a ConfigMap update (..data symlink swap) in the RUNTIME_ROOT layout Istio uses', async () => {
    // RUNTIME_ROOT/ratelimit/config is the ConfigMap mount: config.yaml -> ..data/config.yaml,
    // ..data -> ..<timestamp>; kubelet swaps ..data in one rename.
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-runtime-'));
    const mount = path.join(root, 'ratelimit', 'config');
    fs.mkdirSync(mount, { recursive: true });
    const publish = (version: string, yaml: string): void => {
      const dir = path.join(mount, `..${version}`);
      fs.mkdirSync(dir);
      fs.writeFileSync(path.join(dir, 'config.yaml'), yaml);
      const tmpLink = path.join(mount, '..data_tmp');
      fs.symlinkSync(`..${version}`, tmpLink);
      fs.renameSync(tmpLink, path.join(mount, '..data'));
    };
    publish('2026_01', limits(5));
    fs.symlinkSync('..data/config.yaml', path.join(mount, 'config.yaml'));
    const svc = await startTestService({
      env: {
        CONFIG_PATH: '',
        RUNTIME_ROOT: root,
        RUNTIME_SUBDIRECTORY: 'ratelimit',
        RUNTIME_WATCH_ROOT: 'false',
        RUNTIME_IGNOREDOTFILES: 'true',
      },
    });
    try {
      expect(await limitSeen(svc, 5, 0)).toBe(5);
      publish('2026_02', limits(11));
      expect(await limitSeen(svc, 11)).toBe(11);
      expect(await rlconfig(svc)).toContain('requests_per_unit=11');
    } finally {
      await svc.stop();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
