import { type Alias, type Document, isAlias, isMap, isPair, isScalar, isSeq, type Node } from 'yaml';
import { ConfigError } from './config-error';

/**
 * How much a config file may make the loader read. The readers follow aliases (src/config/yaml-reader.ts),
 * so a file of a few lines whose anchors each repeat the one before (ten levels of ten aliases) stands
 * for 10^10 nodes: reading it would hold the event loop for minutes on every reload of every replica.
 * Before any reader runs, one pass over the document's own nodes adds up what each alias stands for
 * (each anchored node's expanded size is computed once, so the pass is linear in the file) and how deep
 * the expanded tree goes; a file past either bound is refused with the path of the node that crossed it.
 * The same pass finds each alias's node, which the readers then look up: the parser's own lookup
 * (`Alias.resolve`) walks the whole document for every alias, which is quadratic in a large file.
 */

/** The node each alias of a document names. */
export type AliasTargets = ReadonlyMap<Alias, Node>;

export interface YamlBounds {
  /** Nodes the aliases of one file may add to it, all together (the file's own nodes are not counted). */
  readonly maxAliasNodes: number;
  /** Levels of collections, counted through aliases. */
  readonly maxDepth: number;
}

/**
 * Far above what a config of shared `rate_limit` blocks and metadata reaches (a thousand rules each naming
 * a ten-node block add ten thousand), and still read in a fraction of a second.
 */
export const YAML_BOUNDS: YamlBounds = Object.freeze({ maxAliasNodes: 100_000, maxDepth: 128 });

interface Expanded {
  /** Nodes the subtree stands for, its aliases expanded. */
  readonly nodes: number;
  /** Levels of collections in it, its aliases expanded. */
  readonly depth: number;
}

const SCALAR: Expanded = { nodes: 1, depth: 0 };

/**
 * The node of every alias in `doc`; throws ConfigError naming `file` and the path inside it when the
 * document goes past `bounds`, or an alias names no node before it or the node it is in.
 */
export function checkYamlBounds(file: string, doc: Document, bounds: YamlBounds = YAML_BOUNDS): AliasTargets {
  // Anchors come before their aliases in the text, and so in this walk: each target is measured by then.
  // An alias names the last node with its anchor before it (an anchor may be defined again).
  const anchors = new Map<string, Node>();
  const targets = new Map<Alias, Node>();
  const measured = new Map<Node, Expanded>();
  let aliasNodes = 0;

  const measure = (node: unknown, path: string, depth: number): Expanded => {
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      if (target !== undefined) targets.set(node, target);
      const size = isScalar(target) ? SCALAR : target === undefined ? undefined : measured.get(target);
      if (size === undefined) throw new ConfigError(file, path, `alias *${node.source} refers to a node that contains it or is not defined before it`);
      aliasNodes += size.nodes;
      if (aliasNodes > bounds.maxAliasNodes) {
        throw new ConfigError(file, path, `aliases expand to more than ${bounds.maxAliasNodes} nodes (at *${node.source})`);
      }
      if (depth + size.depth > bounds.maxDepth) throw tooDeep(file, path, bounds);
      return size;
    }
    if (isScalar(node) && node.anchor !== undefined) anchors.set(node.anchor, node);
    if (!isMap(node) && !isSeq(node)) return SCALAR;
    if (node.anchor !== undefined) anchors.set(node.anchor, node);
    if (depth + 1 > bounds.maxDepth) throw tooDeep(file, path, bounds);
    let nodes = 1;
    let deepest = 0;
    const add = (child: unknown, at: string): void => {
      const size = measure(child, at, depth + 1);
      nodes += size.nodes;
      deepest = Math.max(deepest, size.depth);
    };
    node.items.forEach((item: unknown, i: number) => {
      if (isPair(item)) {
        add(item.key, path);
        add(item.value, keyPath(path, item.key));
      } else {
        add(item, `${path}[${i}]`);
      }
    });
    const size = { nodes, depth: deepest + 1 };
    measured.set(node, size);
    return size;
  };

  measure(doc.contents, '', 0);
  return targets;
}

function tooDeep(file: string, path: string, bounds: YamlBounds): ConfigError {
  return new ConfigError(file, path, `nested deeper than ${bounds.maxDepth} levels (aliases expanded)`);
}

function keyPath(path: string, key: unknown): string {
  const name = isScalar(key) ? String(key.source ?? key.value) : '?';
  return path === '' ? name : `${path}.${name}`;
}
