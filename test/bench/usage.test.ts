import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { benchUsage, leadingComment, optionsRead } from '../../bench/lib/usage.ts';

const BENCH = path.join(__dirname, '..', '..', 'bench');
const entries = readdirSync(BENCH).filter((f) => f.endsWith('.ts'));

describe('bench --help', () => {
  it('finds the options a source reads, each once, in order of first use', () => {
    const source = [
      '/**\n * What it measures.\n *\n *     npx tsx bench/x.ts --rate 10\n */',
      "const a = numberArg('rate', 1);",
      "const b = argValue('no-floors') === undefined;",
      "const c = process.argv.includes('--profile');",
      "const d = numberArg('rate', 2);",
      'const e = argValue(name);',
    ].join('\n');
    expect(optionsRead(source)).toEqual(['rate', 'no-floors', 'profile']);
    expect(leadingComment(source)).toBe('What it measures.\n\n    npx tsx bench/x.ts --rate 10');
    const usage = benchUsage('x.ts', source, ["numberArg('node-defaults', 1); numberArg('rate', 1)"]);
    expect(usage).toContain('  --rate\n  --no-floors\n  --profile\n  --help\n');
    expect(usage).toContain('shared bench code it uses:\n  --node-defaults\n');
    expect(usage).not.toMatch(/shared[\s\S]*--rate/);
  });

  it.each(entries)('%s describes itself and answers --help before it starts anything', (file) => {
    const source = readFileSync(path.join(BENCH, file), 'utf8');
    expect(leadingComment(source).length, `${file} has no leading comment to print`).toBeGreaterThan(40);
    expect(/\brunIfMain\(import\.meta\.url|\bexitOnHelp\(import\.meta\.url\)/.test(source), `${file} neither runs through runIfMain nor calls exitOnHelp`).toBe(
      true,
    );
  });

  it('bench/apply.ts --help prints its options and exits 0 without running the benchmark', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(BENCH, 'apply.ts'), '--help'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('npx tsx bench/apply.ts [options]');
    expect(r.stdout).toContain('  --variants\n');
    expect(r.stdout).not.toContain('[apply]');
  }, 90_000);
});
