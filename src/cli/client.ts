import { parseArgs } from 'node:util';
import type { RuleMatch } from '../config/describe';
import type { CliIo } from './io';
import { createRlsClient, type DecodedDescriptorStatus, type RlsRequestInput } from './rls-client';

export const CLIENT_USAGE =
  'usage: slidegate client --domain D --descriptor k=v[,k2=v2...] [--descriptor ...] [--hits N] [--addr host:port] [--debug-addr host:port] [--timeout-ms MS]';

/** `slidegate client --help`. */
export const CLIENT_HELP = [
  CLIENT_USAGE,
  '  Sends one ShouldRateLimit call and prints the answer: the overall code, then per descriptor its code, the',
  '  rule\'s limit and whole window ("5 per 10 s", asked of the debug port), what remains, and when it resets.',
  '  Exit 0 on OK, 2 on OVER_LIMIT, 1 on any error.',
  '  --domain D                 the rate-limit domain (required)',
  '  --descriptor k=v[,k=v]     one descriptor, entries in order (required; repeat for several)',
  '  --hits N                   hits of every descriptor, as its hits_addend; 0 checks without counting (default: 1)',
  '  --addr HOST:PORT           the gRPC address (default: 127.0.0.1:8081)',
  "  --debug-addr HOST:PORT     the debug port, asked for each rule's window (default: the --addr host, port 6070)",
  '  --timeout-ms MS            deadline of the call and of each debug request (default: 2000)',
].join('\n');

/** Exit codes of `slidegate client`: the decision is scriptable. */
export const CLIENT_EXIT = Object.freeze({ ok: 0, error: 1, overLimit: 2 });

/** limit_remaining of an unlimited rule, as the server sends it (no current_limit). */
const UNLIMITED_REMAINING = 4_294_967_295;
const DEFAULT_DEBUG_PORT = 6070;

/** Parses `k=v,k2=v2` into descriptor entries; a value may contain '=' (split at the first one). */
export function parseDescriptor(text: string): { key: string; value: string }[] {
  return text.split(',').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`descriptor entry "${pair}" is not key=value`);
    return { key: pair.slice(0, eq), value: pair.slice(eq + 1) };
  });
}

const UNIT_SHORT: Readonly<Record<string, string>> = { second: 's', minute: 'min', hour: 'h', day: 'd', week: 'weeks', month: 'months', year: 'years' };

/** "5 per 10 s", "100 per minute": a rule's limit over its whole window. */
export function describeLimit(rule: { requestsPerUnit: number; unit: string; unitMultiplier: number }): string {
  const unit = rule.unit.toLowerCase();
  const window = rule.unitMultiplier === 1 ? unit : `${rule.unitMultiplier} ${UNIT_SHORT[unit] ?? unit}`;
  return `${rule.requestsPerUnit} per ${window}`;
}

/**
 * One readable line per descriptor status. `rule` is the debug port's answer for the descriptor:
 * without it the window is the wire's unit alone, which leaves out unit_multiplier.
 */
export function formatStatus(index: number, entries: { key: string; value: string }[], s: DecodedDescriptorStatus, rule?: RuleMatch['rule']): string {
  const what = entries.map((e) => `${e.key}=${e.value}`).join(',');
  const parts = [`  [${index}] ${what}: ${s.code}`];
  if (s.currentLimit) {
    const name = s.currentLimit.name ? ` (${s.currentLimit.name})` : '';
    const sameRule = rule && rule.requestsPerUnit === s.currentLimit.requestsPerUnit && rule.unit.toUpperCase() === s.currentLimit.unit;
    const limit = sameRule
      ? describeLimit(rule)
      : `${s.currentLimit.requestsPerUnit} per ${s.currentLimit.unit.toLowerCase()} unit (window unknown: the debug port did not say)`;
    parts.push(`limit ${limit}${name}`);
    parts.push(`remaining ${s.limitRemaining}`);
  } else if (s.limitRemaining === UNLIMITED_REMAINING) {
    parts.push('unlimited');
  } else {
    parts.push('no matching rule');
  }
  if (s.durationUntilReset) {
    const ms = Number(s.durationUntilReset.seconds) * 1000 + Math.round(s.durationUntilReset.nanos / 1e6);
    parts.push(`reset in ${(ms / 1000).toFixed(3)}s`);
  }
  return parts.join(', ');
}

/** The debug port's /rlmatch answer for one descriptor; undefined when it cannot be had. */
async function askRule(debugAddr: string, domain: string, entries: { key: string; value: string }[], timeoutMs: number): Promise<RuleMatch | undefined> {
  const query = new URLSearchParams([['domain', domain], ...entries.map((e): [string, string] => ['entry', `${e.key}=${e.value}`])]);
  try {
    const res = await fetch(`http://${debugAddr}/rlmatch?${query}`, { signal: AbortSignal.timeout(timeoutMs) });
    return res.ok ? ((await res.json()) as RuleMatch) : undefined;
  } catch {
    return undefined;
  }
}

/** The --addr host with the default debug port ("[::1]:8081" -> "[::1]:6070"). */
function defaultDebugAddr(addr: string): string {
  const colon = addr.lastIndexOf(':');
  return `${colon < 0 ? addr : addr.slice(0, colon)}:${DEFAULT_DEBUG_PORT}`;
}

/**
 * `slidegate client`: one ShouldRateLimit call, printed readably.
 * Exit 0 on OK, 2 on OVER_LIMIT, 1 on any error (bad arguments, unreachable server, gRPC error).
 */
export async function runClient(args: readonly string[], io: CliIo): Promise<number> {
  let request: RlsRequestInput;
  let addr: string;
  let debugAddr: string;
  let timeoutMs: number;
  try {
    const { values } = parseArgs({
      args: [...args],
      options: {
        domain: { type: 'string' },
        descriptor: { type: 'string', multiple: true },
        hits: { type: 'string' },
        addr: { type: 'string', default: '127.0.0.1:8081' },
        'debug-addr': { type: 'string' },
        'timeout-ms': { type: 'string', default: '2000' },
      },
    });
    if (!values.domain) throw new Error('--domain is required');
    if (!values.descriptor || values.descriptor.length === 0) throw new Error('at least one --descriptor is required');
    const hits = values.hits === undefined ? undefined : Number(values.hits);
    if (hits !== undefined && (!Number.isInteger(hits) || hits < 0 || hits > 4_294_967_295))
      throw new Error(`--hits: not a non-negative integer: ${values.hits}`);
    timeoutMs = Number(values['timeout-ms']);
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new Error(`--timeout-ms: not a positive integer: ${values['timeout-ms']}`);
    // Each descriptor's own hits_addend, which the wire honours even at 0 (check only); the
    // request-level field would read 0 as 1.
    request = {
      domain: values.domain,
      descriptors: values.descriptor.map((d) => ({ entries: parseDescriptor(d), ...(hits === undefined ? {} : { hitsAddend: { value: hits } }) })),
    };
    addr = values.addr as string;
    debugAddr = values['debug-addr'] ?? defaultDebugAddr(addr);
  } catch (err) {
    io.err(`${(err as Error).message}\n${CLIENT_USAGE}`);
    return CLIENT_EXIT.error;
  }

  const client = createRlsClient({ address: addr });
  try {
    const response = await client.shouldRateLimit(request, { deadlineMs: timeoutMs });
    const rules = await Promise.all(
      request.descriptors.map((d, i) => (response.statuses[i]?.currentLimit ? askRule(debugAddr, request.domain, d.entries, timeoutMs) : undefined)),
    );
    io.out(response.overallCode);
    response.statuses.forEach((s, i) => io.out(formatStatus(i, request.descriptors[i]?.entries ?? [], s, rules[i]?.rule)));
    for (const h of response.responseHeadersToAdd) io.out(`  header ${h.key}: ${h.value}`);
    const noRule = response.statuses.every((s) => !s.currentLimit && s.limitRemaining !== UNLIMITED_REMAINING);
    if (noRule) io.err(await domainHint(debugAddr, request, timeoutMs));
    if (response.overallCode === 'OVER_LIMIT') return CLIENT_EXIT.overLimit;
    return response.overallCode === 'OK' ? CLIENT_EXIT.ok : CLIENT_EXIT.error;
  } catch (err) {
    io.err(`${addr}: ${(err as Error).message}`);
    return CLIENT_EXIT.error;
  } finally {
    client.close();
  }
}

/** Why no descriptor matched: the domain is not loaded (and which are), or the keys match no rule of it. */
async function domainHint(debugAddr: string, request: RlsRequestInput, timeoutMs: number): Promise<string> {
  const answer = await askRule(debugAddr, request.domain, request.descriptors[0].entries, timeoutMs);
  if (answer === undefined) {
    return `hint: no rule matched; is domain "${request.domain}" loaded? (GET /rlconfig on the debug port lists the rules in force)`;
  }
  if (!answer.domains.includes(request.domain)) {
    const loaded = answer.domains.length === 0 ? 'none' : answer.domains.map((d) => `"${d}"`).join(', ');
    return `hint: domain "${request.domain}" is not loaded (loaded: ${loaded})`;
  }
  return `hint: domain "${request.domain}" is loaded, but no rule of it matches these descriptors (GET ${debugAddr}/rlconfig lists its rules)`;
}
