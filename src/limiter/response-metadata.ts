import type { Plan } from './plan';
import type { StructFields, StructValue } from './types';

/**
 * The response's dynamic metadata (RESPONSE_DYNAMIC_METADATA), in the reference's shape: the domain;
 * per descriptor its entries as `key=value`, its limit override in protobuf text form and its
 * hits_addend when set; the request's hits_addend when not 0; and `metadata`, the rules' metadata
 * merged over the descriptors not over their limit (first one wins for a key, mappings merged key by
 * key). One key of its own: `limitedBy`, the key path of the first rule over its limit, absent when
 * none is. Read from a decided plan (its statuses filled).
 */
export function dynamicMetadataOf(plan: Plan): StructFields {
  const descriptors: StructFields[] = plan.descriptors.map((d) => {
    const out: Record<string, StructValue> = { entries: d.entries.map((e) => `${e.key}=${e.value}`) };
    if (d.limit !== undefined) {
      const parts: string[] = [];
      if (d.limit.requestsPerUnit !== 0) parts.push(`requests_per_unit:${d.limit.requestsPerUnit}`);
      parts.push(`unit:${d.limit.unit.toUpperCase()}`); // the wire enum's name
      out.limit = parts.join(' ');
    }
    if (d.hitsAddend !== undefined) out.hitsAddend = d.hitsAddend;
    return out;
  });
  const fields: Record<string, StructValue> = { domain: plan.domain, descriptors };
  if (plan.hitsAddend !== 0) fields.hitsAddend = plan.hitsAddend;
  // Beyond the reference: which rule denied the request (the first over its limit, by its key path as
  // the metrics name it), for access logs (%DYNAMIC_METADATA(envoy.filters.http.ratelimit:limitedBy)%).
  const first = plan.counted.find(({ index }) => plan.statuses[index].code === 'OVER_LIMIT');
  // Of a rule with several limits, the one its status names.
  const limiting = first === undefined || plan.decidedBy === undefined || first.limit === undefined ? first : plan.counted[plan.decidedBy[first.index]];
  if (limiting !== undefined) fields.limitedBy = (limiting.limit ?? limiting.rule).statKey;
  let merged: Record<string, StructValue> | undefined;
  for (const { index, rule } of plan.counted) {
    if (rule.metadata === undefined || plan.statuses[index].code === 'OVER_LIMIT') continue;
    merged = mergeStruct(merged ?? {}, rule.metadata);
  }
  if (merged !== undefined) fields.metadata = merged;
  return fields;
}

function isStruct(v: StructValue | undefined): v is StructFields {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `into` with the keys of `from` it lacks; where both hold a mapping, merged the same way. Never writes `from`. */
function mergeStruct(into: Record<string, StructValue>, from: StructFields): Record<string, StructValue> {
  for (const key of Object.keys(from)) {
    const mine = Object.prototype.hasOwnProperty.call(into, key) ? into[key] : undefined;
    const theirs = from[key];
    // defineProperty: a metadata key may be "__proto__", which plain assignment would not store.
    if (mine === undefined) Object.defineProperty(into, key, { value: theirs, enumerable: true, writable: true, configurable: true });
    else if (isStruct(mine) && isStruct(theirs)) into[key] = mergeStruct({ ...mine }, theirs);
  }
  return into;
}
