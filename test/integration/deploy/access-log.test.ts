import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse } from 'yaml';
import { descriptor } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';
import { plainStruct } from '../../helpers/struct';

/**
 * The Envoy access-log recipe (deploy/envoy/access-log.yaml) against the service's real
 * dynamic_metadata: every key the recipe reads exists where Envoy's rate-limit filter puts it, and
 * `limitedBy` names the rule that denied the request.
 */

const RECIPE = path.resolve(__dirname, '../../../deploy/envoy/access-log.yaml');
/** Where Envoy's HTTP rate-limit filter stores the response's dynamic_metadata. */
const NAMESPACE = 'envoy.filters.http.ratelimit';

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {rule: api_key}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100}
        metadata: {rule: acme_path}
`;

let svc: TestService;

/** Every `%DYNAMIC_METADATA(namespace:key[:key...])%` of the recipe's log format, by field name. */
function metadataFields(): Map<string, { namespace: string; path: string[] }> {
  const recipe = parse(fs.readFileSync(RECIPE, 'utf8')) as { access_log: { typed_config: { log_format: { json_format: Record<string, string> } } }[] };
  const out = new Map<string, { namespace: string; path: string[] }>();
  for (const log of recipe.access_log) {
    for (const [field, format] of Object.entries(log.typed_config.log_format.json_format)) {
      const m = /^%DYNAMIC_METADATA\(([^:)]+)((?::[^:)]+)+)\)%$/.exec(format);
      if (m !== null) out.set(field, { namespace: m[1], path: m[2].slice(1).split(':') });
    }
  }
  return out;
}

/** What Envoy's %DYNAMIC_METADATA% reads at a path of the filter's metadata (undefined: logged as "-"). */
function lookup(metadata: Record<string, unknown>, keys: readonly string[]): unknown {
  let at: unknown = metadata;
  for (const key of keys) at = typeof at === 'object' && at !== null && !Array.isArray(at) ? (at as Record<string, unknown>)[key] : undefined;
  return at;
}

beforeAll(async () => {
  svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { RESPONSE_DYNAMIC_METADATA: 'true' } });
});

afterAll(async () => {
  await svc?.stop();
});

it('reads the keys of the rate-limit filter namespace that the service fills', async () => {
  const fields = metadataFields();
  expect([...fields.keys()]).toEqual(['ratelimit_limited_by', 'ratelimit_domain', 'ratelimit_descriptors', 'ratelimit_metadata']);
  for (const { namespace } of fields.values()) expect(namespace).toBe(NAMESPACE);

  const request = {
    domain: 'edge',
    descriptors: [
      descriptor([
        ['tenant', 'acme'],
        ['path', '/reports'],
      ]),
      descriptor([['api_key', 'mallory']]),
    ],
  };
  const allowed = plainStruct((await svc.client.shouldRateLimit(request)).dynamicMetadata);
  const denied = plainStruct((await svc.client.shouldRateLimit(request)).dynamicMetadata);
  const read = (metadata: Record<string, unknown>) => Object.fromEntries([...fields].map(([field, { path: keys }]) => [field, lookup(metadata, keys)]));

  expect(read(denied)).toEqual({
    ratelimit_limited_by: 'api_key',
    ratelimit_domain: 'edge',
    ratelimit_descriptors: [{ entries: ['tenant=acme', 'path=/reports'] }, { entries: ['api_key=mallory'] }],
    ratelimit_metadata: { rule: 'acme_path' },
  });
  expect(read(allowed)).toEqual({
    ratelimit_limited_by: undefined,
    ratelimit_domain: 'edge',
    ratelimit_descriptors: [{ entries: ['tenant=acme', 'path=/reports'] }, { entries: ['api_key=mallory'] }],
    ratelimit_metadata: { rule: 'acme_path' },
  });
});
