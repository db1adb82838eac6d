/**
 * The house rules of the source tree that a type checker does not see (docs/architecture.md,
 * "Where things live"):
 * - no import cycle among the modules of lambda/, local/, lib/, bin/ and contracts/ (type-only
 *   imports count: a cycle of types is still two modules that cannot be read one before the other);
 * - a handler (a file of lambda/handlers/) only wires, so it stays short.
 *
 * The graph is built from every relative import and export-from of the `.ts` sources, found by the
 * TypeScript compiler's own pre-processor (so comments and strings never count as imports).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';
import { describe, expect, test } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const SOURCE_FOLDERS = ['lambda', 'local', 'lib', 'bin', 'contracts'];
const HANDLER_MAX_LINES = 150;
/**
 * Handlers still over the limit, each with the lines it may not exceed and why: orchestration
 * that has not moved out yet (issue 31, "One home per workflow"). An entry fails the test once
 * its handler is under the limit, so the list only shrinks.
 */
const NOT_YET_THIN: Record<string, { maxLines: number; why: string }> = {};

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(full));
    else if (entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(full);
  }
  return out;
}

/** Resolves a relative specifier to a source file of the tree, or undefined (a package, a JSON file). */
function resolveImport(from: string, specifier: string, known: Set<string>): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(from), specifier);
  const candidates = [base, base.replace(/\.js$/, '.ts'), `${base}.ts`, path.join(base, 'index.ts')];
  return candidates.find((c) => known.has(c));
}

/** Every module's relative imports, as paths relative to the repository root. */
export function importGraph(root = ROOT): Map<string, string[]> {
  const files = SOURCE_FOLDERS.filter((f) => fs.existsSync(path.join(root, f))).flatMap((f) => sourceFiles(path.join(root, f)));
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const info = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
    const targets = info.importedFiles.map((i) => resolveImport(file, i.fileName, known)).filter((t): t is string => t !== undefined);
    graph.set(path.relative(root, file), [...new Set(targets.map((t) => path.relative(root, t)))].sort());
  }
  return graph;
}

/** The strongly connected components with more than one module (or a module importing itself): Tarjan's algorithm. */
export function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return found;
}

/** One concrete loop inside a component, for the failure message: a -> b -> … -> a. */
function loopIn(component: string[], graph: Map<string, string[]>): string {
  const members = new Set(component);
  const start = component[0]!;
  const parent = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (!members.has(w)) continue;
      if (w === start) {
        const pathBack = [v];
        while (pathBack[0] !== start) pathBack.unshift(parent.get(pathBack[0]!)!);
        return [...pathBack, start].join(' -> ');
      }
      if (!parent.has(w)) {
        parent.set(w, v);
        queue.push(w);
      }
    }
  }
  return component.join(', ');
}

describe('the house', () => {
  test('the cycle finder finds a loop (a fixture graph, so the check below cannot pass vacuously)', () => {
    const g = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts', 'd.ts']],
      ['d.ts', []],
      ['e.ts', ['e.ts']],
    ]);
    const found = cycles(g);
    expect(found).toEqual([['a.ts', 'b.ts', 'c.ts'], ['e.ts']]);
    expect(loopIn(found[0]!, g)).toBe('a.ts -> b.ts -> c.ts -> a.ts');
  });

  test('the graph sees the source tree (relative imports resolved to files)', () => {
    const graph = importGraph();
    expect(graph.size).toBeGreaterThan(100);
    expect(graph.get('lib/index.ts')?.length ?? 0).toBeGreaterThan(5);
  });

  test('no import cycle in lambda/, local/, lib/, bin/, contracts/', () => {
    const graph = importGraph();
    const loops = cycles(graph).map((c) => loopIn(c, graph));
    expect(loops, `import cycles:\n${loops.join('\n')}`).toEqual([]);
  });

  test(`no handler over ${HANDLER_MAX_LINES} lines (a handler only wires: environment, adapters, one workflow, report)`, () => {
    const dir = path.join(ROOT, 'lambda', 'handlers');
    const handlers = fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.ts'))
      .map((e) => ({ name: e.name, lines: fs.readFileSync(path.join(dir, e.name), 'utf8').split('\n').length - 1 }));
    const problems: string[] = [];
    for (const h of handlers) {
      const allowed = NOT_YET_THIN[h.name];
      if (allowed === undefined && h.lines > HANDLER_MAX_LINES) problems.push(`lambda/handlers/${h.name}: ${h.lines} lines (at most ${HANDLER_MAX_LINES})`);
      if (allowed !== undefined && h.lines > allowed.maxLines)
        problems.push(`lambda/handlers/${h.name}: ${h.lines} lines, more than the ${allowed.maxLines} it is allowed while ${allowed.why}`);
      if (allowed !== undefined && h.lines <= HANDLER_MAX_LINES)
        problems.push(`lambda/handlers/${h.name}: ${h.lines} lines, under the limit now: remove it from NOT_YET_THIN`);
    }
    for (const name of Object.keys(NOT_YET_THIN))
      if (!handlers.some((h) => h.name === name)) problems.push(`NOT_YET_THIN names ${name}, which is not a handler`);
    expect(problems, problems.join('\n')).toEqual([]);
  });
});
