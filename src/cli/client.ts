import { parseArgs } from 'node:util';
import type { CliIo } from './io';
import { createRlsClient, type DecodedDescriptorStatus, type RlsRequestInput } from './rls-client';

export const CLIENT_USAGE =
  'usage: slidegate client --domain D --descriptor k=v[,k2=v2...] [--descriptor ...] [--hits N] [--addr host:port] [--timeout-ms MS]';

/** Exit codes of `slidegate client`: the decision is scriptable. */
export const CLIENT_EXIT = Object.freeze({ ok: 0, error: 1, overLimit: 2 });

/** Parses `k=v,k2=v2` into descriptor entries; a value may contain '=' (split at the first one). */
export function parseDescriptor(text: string): { key: string; value: string }[] {
  return text.split(',').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`descriptor entry "${pair}" is not key=value`);
    return { key: pair.slice(0, eq), value: pair.slice(eq + 1) };
  });
}

/** One readable line per descriptor status. */
export function formatStatus(index: number, entries: { key: string; value: string }[], s: DecodedDescriptorStatus): string {
  const what = entries.map((e) => `${e.key}=${e.value}`).join(',');
  const parts = [`  [${index}] ${what}: ${s.code}`];
  if (s.currentLimit) {
    const name = s.currentLimit.name ? ` (${s.currentLimit.name})` : '';
    parts.push(`limit ${s.currentLimit.requestsPerUnit}/${s.currentLimit.unit.toLowerCase()}${name}`);
    parts.push(`remaining ${s.limitRemaining}`);
  } else {
    parts.push('no matching rule');
  }
  if (s.durationUntilReset) {
    const ms = Number(s.durationUntilReset.seconds) * 1000 + Math.round(s.durationUntilReset.nanos / 1e6);
    parts.push(`reset in ${(ms / 1000).toFixed(3)}s`);
  }
  return parts.join(', ');
}

/**
 * `slidegate client`: one ShouldRateLimit call, printed readably.
 * Exit 0 on OK, 2 on OVER_LIMIT, 1 on any error (bad arguments, unreachable server, gRPC error).
 */
export async function runClient(args: readonly string[], io: CliIo): Promise<number> {
  let request: RlsRequestInput;
  let addr: string;
  let timeoutMs: number;
  try {
    const { values } = parseArgs({
      args: [...args],
      options: {
        domain: { type: 'string' },
        descriptor: { type: 'string', multiple: true },
        hits: { type: 'string' },
        addr: { type: 'string', default: '127.0.0.1:8081' },
        'timeout-ms': { type: 'string', default: '2000' },
      },
    });
    if (!values.domain) throw new Error('--domain is required');
    if (!values.descriptor || values.descriptor.length === 0) throw new Error('at least one --descriptor is required');
    const hits = values.hits === undefined ? 0 : Number(values.hits);
    if (!Number.isInteger(hits) || hits < 0 || hits > 4_294_967_295) throw new Error(`--hits: not a non-negative integer: ${values.hits}`);
    timeoutMs = Number(values['timeout-ms']);
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new Error(`--timeout-ms: not a positive integer: ${values['timeout-ms']}`);
    request = {
      domain: values.domain,
      descriptors: values.descriptor.map((d) => ({ entries: parseDescriptor(d) })),
      hitsAddend: hits,
    };
    addr = values.addr as string;
  } catch (err) {
    io.err(`${(err as Error).message}\n${CLIENT_USAGE}`);
    return CLIENT_EXIT.error;
  }

  const client = createRlsClient({ address: addr });
  try {
    const response = await client.shouldRateLimit(request, { deadlineMs: timeoutMs });
    io.out(response.overallCode);
    response.statuses.forEach((s, i) => io.out(formatStatus(i, request.descriptors[i]?.entries ?? [], s)));
    for (const h of response.responseHeadersToAdd) io.out(`  header ${h.key}: ${h.value}`);
    if (response.overallCode === 'OVER_LIMIT') return CLIENT_EXIT.overLimit;
    return response.overallCode === 'OK' ? CLIENT_EXIT.ok : CLIENT_EXIT.error;
  } catch (err) {
    io.err(`${addr}: ${(err as Error).message}`);
    return CLIENT_EXIT.error;
  } finally {
    client.close();
  }
}
