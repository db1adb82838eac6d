/**
 * A source file stays small enough to hold in one's head (docs/architecture.md, "Files over 600 lines"):
 * no `.ts` file of lambda/, lib/, local/, bin/ or contracts/ is over 600 lines, unless it is listed
 * below with the lines it may not exceed AND that section of docs/architecture.md names it with why.
 *
 * The list only shrinks: a listed file over its ceiling fails (split it, or lower the ceiling
 * when it shrinks, never raise it); one at or under the limit fails until its entry is removed;
 * an entry naming no file fails; so does a file the docs section names that is not listed, or
 * one listed that the section does not name.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, test } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const SOURCE_FOLDERS = ['lambda', 'lib', 'local', 'bin', 'contracts'];
const MAX_LINES = 600;
const DOC = 'docs/architecture.md';
const SECTION = 'Files over 600 lines';

/** Files over the limit, each with the lines it may not exceed (its length when listed; lower it as it shrinks). */
const OVER_THE_LIMIT: Record<string, number> = {
  'lambda/adapters/warehouse-pg.ts': 1424,
  'lambda/core/warehouse/warehouse-sql.ts': 1266,
  'lambda/core/capture/normalize.ts': 886,
  'lambda/core/snapshot/snapshot.ts': 881,
  'local/capture.ts': 682,
  'lambda/core/reconcile/reconcile.ts': 812,
  'local/pipeline.ts': 671,
  'local/poller.ts': 682,
  'lib/cdc-source.ts': 616,
};

/** Lines as `wc -l` counts them (the house test of handlers counts the same way). */
function lineCount(file: string): number {
  return fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n').length - 1;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
    const rel = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(rel));
    else if (entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(rel.split(path.sep).join('/'));
  }
  return out;
}

/** The text of one `###` section of a Markdown page (up to the next heading of level 1 to 3), or null. */
export function sectionText(markdown: string, heading: string): string | null {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => /^#{2,3} /.test(l) && l.replace(/^#+ /, '').trim() === heading);
  if (start < 0) return null;
  const end = lines.findIndex((l, i) => i > start && /^#{1,3} /.test(l));
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

/** The files a section names with a reason: a table row or list item whose first code span is a path, followed by at least a few words. */
export function filesWithReasons(section: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of section.split('\n')) {
    const m = /^\s*(?:\||[-*])\s*`([^`]+\.ts)`\s*\|?\s*(.*)$/.exec(line);
    if (m) out.set(m[1]!, m[2]!.replace(/\|/g, ' ').trim());
  }
  return out;
}

/** Everything wrong with the tree against the list and the docs section (empty when all is well). */
export function problems(
  files: ReadonlyMap<string, number>,
  listed: Readonly<Record<string, number>>,
  documented: ReadonlyMap<string, string> | null,
): string[] {
  const out: string[] = [];
  for (const [file, lines] of files) {
    const ceiling = listed[file];
    if (ceiling === undefined && lines > MAX_LINES)
      out.push(`${file}: ${lines} lines (at most ${MAX_LINES}, or listed in OVER_THE_LIMIT and in ${DOC}, "${SECTION}")`);
    if (ceiling !== undefined && lines > ceiling)
      out.push(`${file}: ${lines} lines, more than its ceiling of ${ceiling}: split it rather than raise the ceiling`);
    if (ceiling !== undefined && lines <= MAX_LINES)
      out.push(`${file}: ${lines} lines, under the limit now: remove it from OVER_THE_LIMIT and from ${DOC}, "${SECTION}"`);
  }
  for (const file of Object.keys(listed)) if (!files.has(file)) out.push(`OVER_THE_LIMIT names ${file}, which is not a source file`);
  if (documented === null) {
    out.push(`${DOC} has no section "${SECTION}"`);
    return out;
  }
  for (const file of Object.keys(listed)) {
    const why = documented.get(file);
    if (why === undefined) out.push(`${file} is over the limit but ${DOC}, "${SECTION}" does not name it with why`);
    else if (why.split(/\s+/).length < 8) out.push(`${DOC}, "${SECTION}": the why of ${file} is too short to be one ("${why}")`);
  }
  for (const file of documented.keys()) if (listed[file] === undefined) out.push(`${DOC}, "${SECTION}" names ${file}, which OVER_THE_LIMIT does not list`);
  return out;
}

describe('the house: file sizes', () => {
  test('the check fails on a file over the limit, over its ceiling, under the limit while listed, or listed without a why (fixtures)', () => {
    const files = new Map([
      ['a.ts', 601],
      ['b.ts', 700],
      ['c.ts', 650],
      ['d.ts', 600],
      ['e.ts', 10],
    ]);
    const listed = { 'b.ts': 690, 'c.ts': 650, 'd.ts': 640, 'gone.ts': 900 };
    const why = 'holds one protocol state machine whose states read each other closely';
    const docs = filesWithReasons(`| \`b.ts\` | ${why} |\n- \`c.ts\`: short\n| \`d.ts\` | ${why} |\n| \`gone.ts\` | ${why} |\n| \`e.ts\` | ${why} |`);
    expect(problems(files, listed, docs)).toEqual([
      `a.ts: 601 lines (at most 600, or listed in OVER_THE_LIMIT and in ${DOC}, "${SECTION}")`,
      'b.ts: 700 lines, more than its ceiling of 690: split it rather than raise the ceiling',
      `d.ts: 600 lines, under the limit now: remove it from OVER_THE_LIMIT and from ${DOC}, "${SECTION}"`,
      'OVER_THE_LIMIT names gone.ts, which is not a source file',
      `${DOC}, "${SECTION}": the why of c.ts is too short to be one (": short")`,
      `${DOC}, "${SECTION}" names e.ts, which OVER_THE_LIMIT does not list`,
    ]);
    expect(problems(new Map([['x.ts', 700]]), { 'x.ts': 700 }, null)).toEqual([`${DOC} has no section "${SECTION}"`]);
  });

  test('the section reader finds a section up to the next heading', () => {
    const md = '## 6. Code layout\ntext\n### Files over 600 lines\n| `a.ts` | why |\n### Next\n| `b.ts` | no |\n';
    expect(sectionText(md, SECTION)).toBe('| `a.ts` | why |');
    expect(sectionText(md, 'Missing')).toBeNull();
  });

  test(`no source file over ${MAX_LINES} lines unless listed with its ceiling and named with why in ${DOC}`, () => {
    const files = new Map(
      SOURCE_FOLDERS.filter((f) => fs.existsSync(path.join(ROOT, f)))
        .flatMap((f) => sourceFiles(f))
        .map((f) => [f, lineCount(f)] as const),
    );
    expect(files.size).toBeGreaterThan(100);
    const section = sectionText(fs.readFileSync(path.join(ROOT, DOC), 'utf8'), SECTION);
    const found = problems(files, OVER_THE_LIMIT, section === null ? null : filesWithReasons(section));
    expect(found, found.join('\n')).toEqual([]);
  });
});
