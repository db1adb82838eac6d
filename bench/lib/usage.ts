/**
 * `--help` for every benchmark: the bench file's own description (its leading comment) and the
 * options its source reads (`argValue('…')`, `numberArg('…')`, `process.argv.includes('--…')`,
 * in the file and in the `./lib/` files it imports), printed before anything is started. Without
 * it, `--help` was an unknown option and ran the whole benchmark.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const OPTION_PATTERNS = [/\b(?:argValue|numberArg)\('([a-z0-9-]+)'/g, /\bargv\.includes\('--([a-z0-9-]+)'\)/g];

/** The option names (without `--`) a source reads, in order of first use, each once. */
export function optionsRead(source: string): string[] {
  const found: { name: string; at: number }[] = [];
  for (const pattern of OPTION_PATTERNS) for (const m of source.matchAll(pattern)) found.push({ name: m[1]!, at: m.index });
  found.sort((a, b) => a.at - b.at);
  return [...new Set(found.map((f) => f.name))];
}

/** The source's leading `/** … *\/` comment as plain text (its ` * ` margins taken off), or '' when it has none. */
export function leadingComment(source: string): string {
  const m = /^\s*\/\*\*([\s\S]*?)\*\//.exec(source);
  if (!m) return '';
  return m[1]!
    .split('\n')
    .map((l) => l.replace(/^\s*\* ?/, ''))
    .join('\n')
    .trim();
}

/** The sources of the `./lib/*.ts` files a bench source imports (one level: where shared options are read). */
function importedLibSources(source: string, dir: string): string[] {
  const out: string[] = [];
  for (const m of source.matchAll(/from '\.\/lib\/([a-z0-9-]+\.ts)'/g)) {
    const file = path.join(dir, 'lib', m[1]!);
    if (existsSync(file)) out.push(readFileSync(file, 'utf8'));
  }
  return out;
}

/** The help text of the bench whose source is `source` (file name `file`; `libSources`: what it imports). */
export function benchUsage(file: string, source: string, libSources: readonly string[] = []): string {
  const own = optionsRead(source);
  const shared = libSources.flatMap(optionsRead).filter((o) => !own.includes(o));
  const lines = [`npx tsx bench/${file} [options]`, '', leadingComment(source), '', 'Options read:'];
  for (const o of [...own, 'help']) lines.push(`  --${o}`);
  if (shared.length > 0) lines.push('', 'Options read by the shared bench code it uses:', ...[...new Set(shared)].map((o) => `  --${o}`));
  return `${lines.join('\n')}\n`;
}

/** Prints the bench's usage and exits 0 when the command line asks for `--help` or `-h`; returns otherwise. */
export function exitOnHelp(metaUrl: string): void {
  if (!process.argv.slice(2).some((a) => a === '--help' || a === '-h')) return;
  const file = fileURLToPath(metaUrl);
  const source = readFileSync(file, 'utf8');
  process.stdout.write(benchUsage(path.basename(file), source, importedLibSources(source, path.dirname(file))));
  process.exit(0);
}
