/**
 * Citations of the repository's docs in source comments and docs point at headings that exist
 * (the house rule of docs/architecture.md, "6. Code layout": comments cite docs of this repository
 * by heading, never documents outside it).
 *
 * A citation is a docs file followed by a section number (`docs/architecture.md §5.4`,
 * `docs/performance-log.md, section 21`) or a quoted heading (`docs/performance-log.md, "Merges
 * that do not stop appends"`, several joined by `,` or `and`). A section number must be one of the
 * file's numbered headings; a quoted heading must name exactly one heading of the file (or one
 * label: a bold run opening a paragraph or list item, `**Truncate.**`, or a table row's first
 * cell), with or without its number, whole or up to a word boundary. Inside docs/, a bare `§N` cites the page it
 * is on. The file itself must exist. References to documents outside the repository (a "DESIGN"
 * document, numbered seeds) fail by name.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SELF = path.relative(ROOT, fileURLToPath(import.meta.url));
const SCANNED = ['README.md', 'docs', 'lambda', 'lib', 'local', 'bin', 'contracts', 'bench', 'scripts', 'test'];
const SKIPPED = new Set(['node_modules', 'dist', 'cdk.out', 'fixtures', '__snapshots__', 'results']);
const EXTENSIONS = /\.(ts|mts|js|mjs|md)$/;

interface Heading {
  /** A markdown heading, or a label: a bold run opening a paragraph or list item, a table row's first cell. */
  readonly kind: 'heading' | 'label';
  readonly number: string | null;
  readonly name: string;
  readonly full: string;
}

interface Citation {
  readonly at: string;
  readonly doc: string;
  readonly section?: string;
  readonly heading?: string;
}

/** The headings and labels of a markdown text, outside fenced code. */
function headingsOf(markdown: string): Heading[] {
  const out: Heading[] = [];
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const heading = /^#{1,6}\s+(.+?)\s*$/.exec(line);
    if (heading) {
      const full = heading[1]!;
      const n = /^(\d+(?:\.\d+)*[a-z]?)\.?\s+(.+)$/.exec(full);
      out.push({ kind: 'heading', number: n ? n[1]! : null, name: n ? n[2]! : full, full });
      continue;
    }
    const label = /^\s*(?:[-*]\s+|\d+\.\s+)?\*\*([^*]+?)[.:]?\*\*/.exec(line) ?? /^\|\s*([^|*]+?)\s*\|/.exec(line);
    if (label && !/^-+$/.test(label[1]!)) out.push({ kind: 'label', number: null, name: label[1]!, full: label[1]! });
  }
  return out;
}

/** Whether `cited` names `text` (code marks aside): equal, or `text` starts with it and continues after a word boundary. */
function names(text: string, cited: string): boolean {
  const [t, c] = [text.replaceAll('`', ''), cited.replaceAll('`', '')];
  return t === c || (t.startsWith(c) && /^[\s,:;(—–.]/.test(t.slice(c.length)));
}

/** Why a citation does not resolve against its file's headings, or null when it does. */
function unresolved(c: Citation, headings: readonly Heading[] | undefined): string | null {
  if (!headings) return `${c.at}: cites ${c.doc}, which does not exist`;
  if (c.section !== undefined) {
    return headings.some((h) => h.kind === 'heading' && h.number === c.section) ? null : `${c.at}: cites ${c.doc} §${c.section}, a section it does not have`;
  }
  const cited = c.heading!;
  const bare = cited.replaceAll('`', '');
  const exact = headings.filter((h) => [h.full, h.name].some((x) => x.replaceAll('`', '') === bare));
  const matching = headings.filter((h) => names(h.full, cited) || names(h.name, cited));
  if (exact.filter((h) => h.kind === 'heading').length === 1 || exact.length === 1 || (exact.length === 0 && matching.length === 1)) return null;
  if (matching.length === 0) return `${c.at}: cites ${c.doc}, "${cited}", a heading it does not have`;
  return `${c.at}: cites ${c.doc}, "${cited}", which names ${matching.length} headings (${matching.map((h) => h.full).join(' | ')}); cite it with its number`;
}

/** Comment markers at line starts removed and lines joined, so that a citation may wrap. */
function flatten(text: string, isMarkdown: boolean): string {
  return isMarkdown ? text.replace(/\n\s*/g, ' ') : text.replace(/\n\s*(?:\*(?!\/)|\/\/)?\s*/g, ' ');
}

const DOC = String.raw`(?:docs\/)?([a-z][a-z0-9-]*\.md)(?:\]\([a-z0-9-]*\.md\))?`;
const SECTIONS = String.raw`(?:§\s?|section\s)(\d+(?:\.\d+)*[a-z]?)((?:(?:,\s*|\s+and\s+)§\s?\d+(?:\.\d+)*[a-z]?)*)`;
const QUOTED = String.raw`"([^"\n]{1,160})"((?:(?:,\s*|\s+and\s+)"[^"\n]{1,160}")*)`;
const CITATION = new RegExp(String.raw`\b${DOC},?\s+(?:(?:there\s+)?${SECTIONS}|${QUOTED})`, 'g');
const BARE_SECTION = /(?<![\w.)\]])§\s?(\d+(?:\.\d+)*[a-z]?)/g;

/**
 * The citations in one file's text. `docsDir` is set for a file in docs/, where `x.md` means
 * docs/x.md and a bare `§N` cites the page itself; elsewhere only `docs/x.md` cites a doc.
 */
function citationsIn(file: string, text: string): Citation[] {
  const isMarkdown = file.endsWith('.md');
  const inDocs = file.startsWith('docs/');
  const flat = flatten(text, isMarkdown);
  const out: Citation[] = [];
  let rest = flat;
  for (const m of flat.matchAll(CITATION)) {
    rest = rest.slice(0, m.index) + ' '.repeat(m[0].length) + rest.slice(m.index + m[0].length);
    const written = m[0];
    if (!/^docs\//.test(written) && !inDocs) continue;
    const doc = `docs/${m[1]}`;
    const at = `${file}: "${written.slice(0, 80)}"`;
    if (m[2] !== undefined) {
      out.push({ at, doc, section: m[2] });
      for (const more of (m[3] ?? '').matchAll(/§\s?(\d+(?:\.\d+)*[a-z]?)/g)) out.push({ at, doc, section: more[1]! });
    } else {
      out.push({ at, doc, heading: m[4]! });
      for (const more of (m[5] ?? '').matchAll(/"([^"]+)"/g)) out.push({ at, doc, heading: more[1]! });
    }
  }
  if (inDocs) {
    const withoutCode = rest.replace(/`[^`]*`/g, '');
    for (const m of withoutCode.matchAll(BARE_SECTION)) {
      out.push({ at: `${file}: "${withoutCode.slice(m.index, m.index + 40)}"`, doc: file, section: m[1]! });
    }
  }
  return out;
}

/** Mentions of documents that are not in the repository. */
function outsideReferences(file: string, text: string): string[] {
  const flat = flatten(text, file.endsWith('.md'));
  const found: string[] = [];
  const rules: [RegExp, string][] = [
    [/\bDESIGN(?:\.md)?\s*(?:§|invariant\b)/g, 'a DESIGN document'],
    [/\bDESIGN\.md\b/g, 'a DESIGN document'],
    [/\bseeds?\s+0\d\d\b/g, 'a numbered seed document'],
  ];
  for (const [re, what] of rules) {
    for (const m of flat.matchAll(re))
      found.push(`${file}: "${flat.slice(m.index, m.index + 60)}" cites ${what}, which is not in the repository: cite a heading of docs/ instead`);
  }
  for (const m of flat.matchAll(/\bdocs\/([a-z][a-z0-9-]*\.md)\b/g)) {
    if (!existsSync(path.join(ROOT, 'docs', m[1]!))) found.push(`${file}: cites docs/${m[1]}, which does not exist`);
  }
  return found;
}

function scannedFiles(): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    const abs = path.join(ROOT, rel);
    if (statSync(abs).isDirectory()) {
      for (const name of readdirSync(abs)) if (!SKIPPED.has(name)) walk(path.join(rel, name));
    } else if (EXTENSIONS.test(rel) && rel !== SELF) {
      out.push(rel.split(path.sep).join('/'));
    }
  };
  for (const rel of SCANNED) if (existsSync(path.join(ROOT, rel))) walk(rel);
  return out.sort();
}

function headingsByDoc(): Map<string, Heading[]> {
  const docs = new Map<string, Heading[]>();
  for (const name of readdirSync(path.join(ROOT, 'docs'))) {
    if (name.endsWith('.md')) docs.set(`docs/${name}`, headingsOf(readFileSync(path.join(ROOT, 'docs', name), 'utf8')));
  }
  return docs;
}

describe('doc citations', () => {
  const headings = `# Perf\n\n## 3. Capture (\`bench/capture.ts\`)\n\n### 3.1 After issue 14 (item 6): fewer objects\n\n## 7. Rebuild from the archive (x)\n\n## 12. Rebuild from the archive, second pass\n\n\`\`\`sh\n# 99. not a heading\n\`\`\`\n`;
  const docs = new Map([['docs/p.md', headingsOf(headings)]]);
  const problems = (file: string, text: string): string[] =>
    citationsIn(file, text)
      .map((c) => unresolved(c, docs.get(c.doc)))
      .filter((p): p is string => p !== null);

  it('resolves section numbers and headings by name, with or without their number, across wrapped comment lines', () => {
    expect(problems('lambda/a.ts', '// see docs/p.md §3 and docs/p.md, section 3.1\n')).toEqual([]);
    expect(
      problems('lambda/a.ts', '/**\n * the capture (docs/p.md,\n * "Capture"); docs/p.md, "3.1 After issue 14" and "12. Rebuild from the archive"\n */'),
    ).toEqual([]);
    expect(citationsIn('lambda/a.ts', '// docs/p.md §3, §7 and §12')).toHaveLength(3);
  });

  it('fails on a section or heading the file lacks, an ambiguous name, a fenced pseudo-heading and a missing file', () => {
    expect(problems('lambda/a.ts', '// docs/p.md §9')).toEqual(['lambda/a.ts: "docs/p.md §9": cites docs/p.md §9, a section it does not have']);
    expect(problems('lambda/a.ts', '// docs/p.md §99')).toHaveLength(1);
    expect(problems('lambda/a.ts', '// docs/p.md, "Snapshot pacing"')[0]).toContain('a heading it does not have');
    expect(problems('lambda/a.ts', '// docs/p.md, "Rebuild from the archive"')[0]).toContain('names 2 headings');
    expect(problems('lambda/a.ts', '// docs/p.md "Capt"')[0]).toContain('a heading it does not have');
    expect(problems('lambda/a.ts', '// docs/gone.md §1')[0]).toContain('docs/gone.md, which does not exist');
  });

  it('reads a bare § inside docs/ as a citation of the page itself, and a list after a file as that file', () => {
    expect(citationsIn('docs/p.md', 'as §3 says; docs/q.md §4, §5 and §6').map((c) => `${c.doc}§${c.section}`)).toEqual([
      'docs/q.md§4',
      'docs/q.md§5',
      'docs/q.md§6',
      'docs/p.md§3',
    ]);
    expect(problems('docs/p.md', 'see §8.')).toEqual(['docs/p.md: "§8.": cites docs/p.md §8, a section it does not have']);
    expect(citationsIn('lambda/a.ts', '// §8 of something')).toEqual([]);
  });

  it('names references to documents outside the repository', () => {
    const seen = outsideReferences('lambda/a.ts', '// (DESIGN §5.3) and (seed 001), DESIGN invariant 2, docs/nowhere.md');
    expect(seen).toHaveLength(4);
    expect(outsideReferences('docs/a.md', 'seed 795758160 was the counterexample; docs/architecture.md')).toEqual([]);
  });

  it('every citation in the repository resolves, and none names a document outside it', () => {
    const docs = headingsByDoc();
    const files = scannedFiles();
    const found: string[] = [];
    let count = 0;
    for (const file of files) {
      const text = readFileSync(path.join(ROOT, file), 'utf8');
      for (const c of citationsIn(file, text)) {
        count++;
        const p = unresolved(c, docs.get(c.doc));
        if (p) found.push(p);
      }
      found.push(...outsideReferences(file, text));
    }
    console.log(`doc citations: ${count} in ${files.length} files`);
    expect(count).toBeGreaterThan(100);
    expect(found).toEqual([]);
  });
});
