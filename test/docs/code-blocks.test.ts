/**
 * Every TypeScript block of README.md and docs/*.md compiles against the package as a user
 * imports it: the package's name (package.json) resolves to lib/index.ts through a `paths` entry
 * of a temporary tsconfig, everything else (aws-cdk-lib, constructs) from the repository's
 * node_modules. Each block is a module of its own. A block that is an excerpt and cannot compile
 * alone is marked with `<!-- fragment: why -->` on the line before it; the reason is required and
 * the test prints how many blocks were compiled and how many are fragments. Blocks that define a
 * `Stack` subclass are synthesized too.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, expect, test } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const PACKAGE = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { name: string }).name;
const FRAGMENT = /^<!--\s*fragment:\s*(.*?)\s*-->\s*$/;

interface Block {
  /** `docs/search.md:9`: the file and the line of the opening fence. */
  readonly where: string;
  readonly code: string;
  /** The line of the block's first code line in its file (1-based). */
  readonly firstLine: number;
  /** The reason given for a fragment, or null for a block that must compile. */
  readonly fragment: string | null;
}

/** The ```ts and ```typescript blocks of a markdown file. */
export function codeBlocks(file: string, text: string): Block[] {
  const lines = text.split('\n');
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^```(ts|typescript)\s*$/.test(lines[i]!)) continue;
    const end = lines.findIndex((l, j) => j > i && /^```\s*$/.test(l));
    if (end < 0) throw new Error(`${file}:${i + 1}: a code block that is never closed`);
    let before = i - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const marker = before >= 0 ? FRAGMENT.exec(lines[before]!) : null;
    if (before >= 0 && /^<!--\s*fragment\b/.test(lines[before]!) && !marker?.[1])
      throw new Error(`${file}:${before + 1}: a fragment marker needs its reason: <!-- fragment: why it cannot compile alone -->`);
    out.push({ where: `${file}:${i + 1}`, code: lines.slice(i + 1, end).join('\n'), firstLine: i + 2, fragment: marker?.[1] ?? null });
    i = end;
  }
  return out;
}

function docFiles(): string[] {
  return [
    'README.md',
    ...fs
      .readdirSync(path.join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .sort()
      .map((f) => `docs/${f}`),
  ];
}

let dir: string;
let blocks: Block[];
const fileOf = new Map<string, Block>();

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-doc-blocks-'));
  // ESM like the repository, with its node_modules: the blocks import aws-cdk-lib as an app does.
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  blocks = docFiles().flatMap((f) => codeBlocks(f, fs.readFileSync(path.join(ROOT, f), 'utf8')));
  blocks.forEach((b, i) => {
    if (b.fragment !== null) return;
    const file = path.join(dir, `block${i}.ts`);
    // `export {}` keeps a block without imports a module: names never clash across blocks.
    fs.writeFileSync(file, `${b.code}\nexport {};\n`);
    fileOf.set(file, b);
  });
});

afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

test('the fragment marker and the block reader', () => {
  const md = ['text', '<!-- fragment: an excerpt -->', '```ts', 'a;', '```', '', '```typescript', 'b;', 'c;', '```', '```sh', 'ls', '```'].join('\n');
  expect(codeBlocks('x.md', md)).toEqual([
    { where: 'x.md:3', code: 'a;', firstLine: 4, fragment: 'an excerpt' },
    { where: 'x.md:7', code: 'b;\nc;', firstLine: 8, fragment: null },
  ]);
  expect(() => codeBlocks('x.md', '<!-- fragment -->\n```ts\na;\n```')).toThrow(/x\.md:1: a fragment marker needs its reason/);
  expect(() => codeBlocks('x.md', '```ts\na;')).toThrow(/never closed/);
});

test('every TypeScript block of README.md and docs/ compiles against the package', () => {
  const base = ts.parseJsonConfigFileContent(ts.readConfigFile(path.join(ROOT, 'tsconfig.json'), ts.sys.readFile).config as object, ts.sys, ROOT).options;
  const options: ts.CompilerOptions = {
    ...base,
    noEmit: true,
    types: ['node'],
    typeRoots: [path.join(ROOT, 'node_modules', '@types')],
    paths: { [PACKAGE]: [path.join(ROOT, 'lib', 'index.ts')] },
  };
  const program = ts.createProgram([...fileOf.keys()], options);
  const problems = ts.getPreEmitDiagnostics(program).map((d) => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    const block = d.file ? fileOf.get(path.resolve(d.file.fileName)) : undefined;
    if (!d.file || d.start === undefined) return `(no file): ${message}`;
    const { line } = d.file.getLineAndCharacterOfPosition(d.start);
    return block
      ? `${block.where.split(':')[0]}:${block.firstLine + line}: TS${d.code} ${message}`
      : `${path.relative(ROOT, d.file.fileName)}:${line + 1}: TS${d.code} ${message}`;
  });
  const fragments = blocks.filter((b) => b.fragment !== null);
  console.log(
    `docs code blocks: ${fileOf.size} compiled, ${fragments.length} fragments${fragments.map((b) => `\n  fragment ${b.where}: ${b.fragment}`).join('')}`,
  );
  expect(fileOf.size).toBeGreaterThan(0);
  expect(problems).toEqual([]);
}, 300_000);

test('the blocks that define a stack synthesize', async () => {
  const stacks: string[] = [];
  for (const [file, block] of fileOf) {
    if (!/extends Stack\b/.test(block.code)) continue;
    // What the app would import from the package, here the repository's sources.
    const runnable = file.replace(/\.ts$/, '.run.ts');
    fs.writeFileSync(
      runnable,
      fs.readFileSync(file, 'utf8').replaceAll(`from '${PACKAGE}'`, `from '${pathToFileURL(path.join(ROOT, 'lib', 'index.ts')).href}'`),
    );
    const mod = (await import(pathToFileURL(runnable).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(mod)) {
      if (typeof value !== 'function' || !(value.prototype instanceof Stack)) continue;
      const app = new App({ outdir: path.join(dir, `out-${stacks.length}`) });
      const stack = new (value as new (scope: App, id: string) => Stack)(app, name);
      const template = Template.fromStack(stack);
      expect(Object.keys(template.toJSON().Resources as object).length, `${block.where}: ${name}`).toBeGreaterThan(0);
      stacks.push(`${block.where} ${name}`);
    }
  }
  console.log(`docs code blocks: synthesized ${stacks.join(', ')}`);
  expect(stacks.length).toBeGreaterThan(0);
}, 300_000);
