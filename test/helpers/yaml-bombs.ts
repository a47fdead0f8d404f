/**
 * Config files of a few lines that stand for billions of YAML nodes once their aliases are followed,
 * for the loader's bounds (src/config/yaml-bounds.ts).
 */

const RULE_LIMIT = 'rate_limit: {unit: second, requests_per_unit: 1}';

/** A valid rule whose metadata holds ten anchors, each a list of ten aliases of the one before: 10^10 nodes in 13 lines. */
export function metadataAliasBomb(domain = 'edge', levels = 10): string {
  const lines = [`domain: ${domain}`, 'descriptors:', '  - key: user', `    ${RULE_LIMIT}`, '    metadata:', '      l0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
  for (let i = 1; i < levels; i++)
    lines.push(
      `      l${i}: &a${i} [${Array(10)
        .fill(`*a${i - 1}`)
        .join(', ')}]`,
    );
  return lines.join('\n') + '\n';
}

/** Rule lists that alias each other, every rule distinct: level n holds ten rules whose descriptors are level n-1 (10^8 rules). */
export function ruleAliasBomb(domain = 'edge', levels = 8): string {
  const lines = [`domain: ${domain}`, 'descriptors:'];
  for (let level = 0; level < levels; level++) {
    const below = level === 0 ? RULE_LIMIT : `descriptors: *r${level - 1}`;
    const rules = Array.from({ length: 10 }, (_, i) => `{key: k${i}, ${below}}`);
    lines.push(`  - key: level${level}`, `    descriptors: &r${level} [${rules.join(', ')}]`);
  }
  return lines.join('\n') + '\n';
}
