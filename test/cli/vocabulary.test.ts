/**
 * One CLI vocabulary (docs/operations.md, "Command line"): every command parses with
 * util.parseArgs against flags of the one table in bin/cli/options.ts, answers --help and
 * `cdc help CMD` with the same text listing every flag it takes, reports a bad command line with
 * exit 2 and a message naming the flag, accepts retired spellings with a deprecation note, and
 * `cdc --version` prints the package's version. In process (no child), through `main`.
 */
import { readFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { COMMANDS, main } from '../../bin/cli/main.ts';
import { EXIT_CODE_MEANING, helpText, parseCommandLine, RETIRED_FLAGS, spelling, VOCABULARY } from '../../bin/cli/options.ts';
import { setDoorOpener, snapshotCell } from '../../bin/cli/operator.ts';
import { parseLocalArgs } from '../../bin/cli/local-args.ts';
import { parseReconcileArgs } from '../../bin/cli/reconcile.ts';
import type { OperatorBody } from '../../lambda/core/operator/operator-front-door.ts';
import type { OperatorDoor } from '../../local/operator-door.ts';

async function cdc(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main(args, { stdin: new PassThrough(), stdout, stderr });
  return { code, out, err };
}

/** A door that records what it was asked and answers an empty status (or an accepted action). */
function recordingDoor(seen: Array<{ path: string; body: OperatorBody }>): () => Promise<OperatorDoor> {
  return async () => ({
    running: false,
    close: async () => undefined,
    invoke: async (path, body) => {
      seen.push({ path, body });
      if (body.request.action === 'status')
        return { ok: true, result: { at: '2026-12-06T00:00:00.000Z', changeLogRetentionMs: 86_400_000, endToEndLag: [], tables: [] } };
      if (body.request.action === 'audit') return { ok: true, result: [] };
      return { ok: true, result: { outcome: 'accepted', action: body.request.action, message: 'done' } as never };
    },
  });
}

afterEach(() => setDoorOpener(null));

const vocabulary = Object.values(VOCABULARY) as unknown[];
const retired = Object.values(RETIRED_FLAGS) as unknown[];

describe('one vocabulary', () => {
  it('gives every flag one name: no two entries of the table share a name, a short form, or a retired spelling', () => {
    const names = Object.values(VOCABULARY).map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    for (const r of Object.values(RETIRED_FLAGS)) expect(names).not.toContain(r.name);
  });

  it.each(COMMANDS.map((c) => [c.spec.name, c] as const))('cdc %s takes only flags of the table, and its help lists each of them', async (name, command) => {
    const flags = command.spec.options.filter((o) => o !== null).map((o) => o.flag);
    for (const f of flags) expect(vocabulary, `${name}: --${f.name} is not in VOCABULARY`).toContain(f);
    for (const r of command.spec.retired ?? []) expect([...vocabulary, ...retired], `${name}: retired --${r.flag.name}`).toContain(r.flag);
    const help = await cdc('help', name);
    expect(help.code).toBe(0);
    expect(help.out).toBe(helpText(command.spec));
    expect((await cdc(name, '--help')).out).toBe(help.out);
    expect((await cdc(name, '-h')).out).toBe(help.out);
    for (const f of flags) expect(help.out).toContain(`  ${spelling(f)}`);
    // One heading style: the same headings, in the same order, in every command's help.
    const headings = help.out.split('\n').filter((l) => /^[A-Z][A-Za-z ()]*:$/.test(l));
    expect(headings.filter((h) => h !== 'Arguments:' && h !== 'Deprecated (accepted until the next release):')).toEqual(['Options:', 'Exit codes:']);
    expect(help.out).toMatch(new RegExp(`^Usage: cdc ${name}`));
    expect(help.out).toContain(`  2  ${EXIT_CODE_MEANING[2]}`);
  });

  it('--actor only where something is written; --json wherever a command reports', () => {
    const takes = (name: string, f: unknown): boolean => COMMANDS.find((c) => c.spec.name === name)!.spec.options.some((o) => o?.flag === f);
    for (const name of ['pause', 'resume', 'resnapshot', 'rebuild']) expect(takes(name, VOCABULARY.actor), name).toBe(true);
    for (const name of ['status', 'audit', 'decode', 'local', 'doctor', 'reconcile']) expect(takes(name, VOCABULARY.actor), name).toBe(false);
    for (const name of ['status', 'audit', 'pause', 'resume', 'resnapshot', 'rebuild', 'local', 'doctor', 'reconcile'])
      expect(takes(name, VOCABULARY.json), name).toBe(true);
    // --source is a database URL wherever it is taken; the source id is --source-id.
    for (const c of COMMANDS) if (takes(c.spec.name, VOCABULARY.source)) expect(['local', 'doctor', 'reconcile']).toContain(c.spec.name);
  });

  it('cdc --version prints the package version; cdc help lists the commands; cdc help NOPE is a usage error', async () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(await cdc('--version')).toEqual({ code: 0, out: `cdc ${pkg.version}\n`, err: '' });
    const top = await cdc('help');
    expect(top.code).toBe(0);
    for (const c of COMMANDS) expect(top.out).toMatch(new RegExp(`\\n  ${c.spec.name} +${c.spec.summary.slice(0, 20).replace(/[()]/g, '.')}`));
    const nope = await cdc('help', 'nope');
    expect(nope.code).toBe(2);
    expect(nope.err).toMatch(/^cdc help: unknown command 'nope'/);
  });
});

describe('a bad command line: exit 2, the flag named', () => {
  const cases: Array<[string[], RegExp]> = [
    [['status', '--bogus'], /^cdc status: unknown option '--bogus' for cdc status$/m],
    [['pause', 'public.t', '--for'], /^cdc pause: --for needs a value \(DURATION\)$/m],
    [['pause', 'public.t', '--for', '--reason', 'x'], /^cdc pause: --for needs a value \(DURATION\)$/m],
    [['audit', '--json=yes'], /^cdc audit: --json takes no value$/m],
    [['doctor', 'extra', '--source', 'postgres://x/y'], /^cdc doctor: cdc doctor takes no argument 'extra'/m],
    [['local', '--demo', '--rate', '-3'], /^cdc local: --rate expects a positive integer, got '-3'$/m],
    [['local', '--demo', '--json'], /^cdc local: --json prints the verdict of a bounded run: it needs --duration$/m],
    [['reconcile', '--settle', 'soon'], /^cdc reconcile: --settle expects a time like 60s, 5m or 1h, got 'soon'$/m],
    [['rebuild', 'public.t', '--reason', 'x'], /^cdc rebuild: unknown option '--reason' for cdc rebuild$/m],
    [['resume', 'public.t', '--state-dir', ''], /^cdc resume: --state-dir must not be empty$/m],
    [['decode', '--source', 'x'], /^cdc decode: --source is a source database URL .* --source-id$/m],
  ];
  it.each(cases)('cdc %j', async (args, message) => {
    const r = await cdc(...args);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(message);
    expect(r.err).toContain(`Run 'cdc help ${args[0]}' for usage.`);
    expect(r.out).toBe('');
  });
});

describe('retired spellings: accepted for one release, with a deprecation note', () => {
  it('operator commands: --source ID becomes --source-id, --table becomes the TABLE argument, --actor on a read is ignored', async () => {
    const seen: Array<{ path: string; body: OperatorBody }> = [];
    setDoorOpener(recordingDoor(seen));
    const status = await cdc('status', 'public.t', '--source', 'shop', '--actor', 'me', '--json');
    expect(status.code).toBe(0);
    expect(JSON.parse(status.out)).toMatchObject({ tables: [] });
    expect(status.err).toMatch(/^cdc status: deprecated: --source named a source id here; use --source-id ID/m);
    expect(status.err).toMatch(/^cdc status: deprecated: --actor has no effect here/m);
    expect(seen[0]).toEqual({ path: expect.stringContaining('status'), body: { request: { action: 'status', source: 'shop', table: 'public.t' } } });
    const audit = await cdc('audit', '--table', 'public.t', '--source-id', 'shop');
    expect(audit.code).toBe(0);
    expect(audit.err).toMatch(/^cdc audit: deprecated: --table is now an argument/m);
    expect(seen[1]!.body.request).toEqual({ action: 'audit', source: 'shop', table: 'public.t' });
    const pause = await cdc('pause', 'public.t', '--for', '10m', '--reason', 'r', '--source-id', 'shop', '--actor', 'note');
    expect(pause).toMatchObject({ code: 0, err: '' });
    expect(seen[2]!.body).toEqual({ request: { action: 'pause', source: 'shop', table: 'public.t', durationMs: 600_000, reason: 'r' }, note: 'note' });
  });

  it('cdc local --sink-id is --warehouse-id; cdc reconcile --table is the TABLE argument', () => {
    const local = parseLocalArgs(['--demo', '--sink-id', 'dw']);
    expect(local.sinkId).toBe('dw');
    expect(local.notes).toEqual([expect.stringMatching(/^cdc local: deprecated: --sink-id is now --warehouse-id ID/)]);
    expect(parseLocalArgs(['--demo', '--warehouse-id', 'dw'])).toMatchObject({ sinkId: 'dw', notes: [] });
    const rec = parseReconcileArgs(['public.a', '--table', 'public.b,public.c']);
    expect(rec.tables).toEqual(['public.a', 'public.b', 'public.c']);
    expect(rec.notes).toHaveLength(1);
  });

  it('a retired flag parses as repeatable, and a vocabulary flag given twice keeps its last value', () => {
    const spec = COMMANDS.find((c) => c.spec.name === 'audit')!.spec;
    const line = parseCommandLine(spec, ['--table', 'public.a', '--state-dir', 'a', '--state-dir', 'b']);
    expect(line.positionals).toEqual(['public.a']);
    expect(line.values['state-dir']).toBe('b');
  });
});

describe('docs/operations.md', () => {
  it('has the exit code table, one row per code, as the CLI states them', () => {
    const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
    for (const [code, meaning] of Object.entries(EXIT_CODE_MEANING)) expect(doc).toContain(`| \`${code}\` | ${meaning} |`);
  });
});

describe('cdc status shows snapshot progress in rows, as the board does', () => {
  it('rows done of the estimate and the throttle, the ETA only while running; chunks only when no rows are reported', () => {
    expect(snapshotCell({ state: 'running', chunksDone: 32, chunksTotal: null, rows: 2538, eta: '146 s', detail: '2538/5000 rows, paused' })).toBe(
      'running 2538/5000 rows, paused ETA 146 s',
    );
    expect(snapshotCell({ state: 'done', chunksDone: 50, rows: 5000, eta: '0 s', detail: '5000/5000 rows, idle' })).toBe('done 5000/5000 rows, idle');
    expect(snapshotCell({ state: 'running', rows: 10 })).toBe('running 10 rows');
    expect(snapshotCell({ state: 'queued', chunksDone: 0 })).toBe('queued 0/? chunks');
  });
});
