import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { validateChangeEvent } from '../../lambda/core/shared/event.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const input = path.join(root, 'test', 'fixtures', 'cli', 'decode-input.jsonl');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'cdc-decode-test-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function cdc(args: string[], stdin?: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(root, 'bin', 'cdc.js'), ...args], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin ?? '');
  });
}

type Printed = Record<string, unknown> & { op: string; key: Record<string, unknown>; position: string; table: string };
const events = (out: string): Printed[] =>
  out
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Printed);

describe('cdc decode', () => {
  it('decodes the fixture, reports bad lines by number and exits 1', async () => {
    const r = await cdc(['decode', input]);
    expect(r.code).toBe(1);
    const out = events(r.stdout);
    expect(out.map((e) => `${e.table} ${e.op} ${JSON.stringify(e.key)}`)).toEqual([
      'public.foo snapshot {"id":42}',
      'public.foo insert {"id":46}',
      'public.foo update {"id":42}',
      'public.foo delete {"id":46}',
      'public.foo insert {"id":45}',
      'public.foo delete {"id":45}',
      'public.t1 insert {"id":7}',
    ]);
    // every printed line is a change event apart from its unknown schema version
    for (const e of out) {
      expect(e.schemaVersion).toBeNull();
      validateChangeEvent({ ...e, schemaVersion: 1 });
    }
    // DMS events are in position order: the load row first, the key change at one position
    const dms = out.filter((e) => e.capture === 'dms').map((e) => e.position);
    expect([...dms].sort()).toEqual(dms);
    expect(dms[0]).toBe('0'.repeat(24));
    expect(dms[3]).toBe(dms[4]);
    expect(out[0]!.source).toBe('cli');
    expect(out[6]!.source).toBe('local');

    const errors = r.stderr.split('\n').filter((l) => /^line \d+:/.test(l));
    expect(errors).toEqual([
      expect.stringMatching(/^line 6: not JSON: /),
      expect.stringMatching(/^line 10: UnknownOperationError: unknown operation 'upsert'/),
      expect.stringMatching(/^line 12: KeyUnknownError: primary key of public\.demo is unknown/),
    ]);
    const notes = r.stderr.split('\n').filter((l) => l.startsWith('note: '));
    expect(notes).toEqual([
      expect.stringMatching(/^note: line 1: control create-table public\.foo .*key id/),
      expect.stringMatching(/^note: line 8: ignored: .*awsdms_apply_exceptions/),
      expect.stringMatching(/^note: line 13: control drop-table public\.foo/),
    ]);
  });

  it('reads stdin, takes --key and --source-id, and exits 0 when every line decodes', async () => {
    const lines = readFileSync(input, 'utf8').split('\n');
    const good = lines.filter((_, i) => ![5, 9].includes(i)).join('\n'); // drop lines 6 and 10
    const r = await cdc(['decode', '--key', 'public.demo=id', '--source-id', 'orders', '--quiet'], good);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = events(r.stdout);
    expect(out).toHaveLength(8);
    expect(out[7]).toMatchObject({ table: 'public.demo', op: 'snapshot', key: { id: 393 }, source: 'orders' });
  });

  it('shows a packed snapshot record as one event per row, next to a per-row one; a malformed row is reported with its index and column, exit 1', async () => {
    const shared = {
      format: 'cdc-slot/1',
      source: 'orders',
      xid: '0',
      commitLsn: '0/16B3747',
      commitTs: '2026-12-01T00:00:00.000000Z',
      index: 4294967295,
      table: 'public.p',
      op: 'snapshot',
      key: ['id'],
    };
    const packed = {
      ...shared,
      columns: [
        { name: 'id', type: 'integer' },
        { name: 'v', type: 'text' },
      ],
      rows: [
        [1, 'a'],
        [2, null],
        [3, 'c'],
      ],
    };
    const perRow = {
      ...shared,
      columns: [
        { name: 'id', type: 'integer', value: 4 },
        { name: 'v', type: 'text', value: 'd' },
      ],
      oldKey: null,
      unchanged: [],
    };
    const broken = {
      ...packed,
      rows: [
        [5, 'e'],
        [6, { bad: 1 }, 'extra'],
      ],
    };
    const r = await cdc(['decode', '--quiet'], [packed, perRow, broken].map((x) => JSON.stringify(x)).join('\n'));
    expect(r.code).toBe(1);
    const out = events(r.stdout);
    expect(out.map((e) => [e.op, e.key, e.after, e.capture, e.position])).toEqual(
      [
        [1, 'a'],
        [2, null],
        [3, 'c'],
        [4, 'd'],
      ].map(([id, v]) => ['snapshot', { id }, { id, v }, 'snapshot', '00000000016b3747ffffffff']),
    );
    expect(r.stderr).toMatch(/^line 3: .*rows\[1\].*3 values for 2 columns/m);
  });

  it('learns a key from a before image seen earlier in the input', async () => {
    const lines = readFileSync(path.join(root, 'test', 'fixtures', 'dms', 'postgres-cdc.jsonl'), 'utf8');
    const [, update, del] = lines.trim().split('\n');
    const r = await cdc(['decode', '-'], `${update}\n${del}\n`);
    expect(r.code).toBe(0);
    expect(events(r.stdout).map((e) => `${e.op} ${JSON.stringify(e.key)}`)).toEqual(['delete {"id":46}', 'insert {"id":45}', 'delete {"id":45}']);
    // without the update first, the delete's key is unknown
    const alone = await cdc(['decode'], `${del}\n`);
    expect(alone.code).toBe(1);
    expect(alone.stderr).toMatch(/^line 1: KeyUnknownError/m);
  });

  it('--source-id means what it means in cdc local; --source (the source URL there) is refused with the right flag named', async () => {
    const wrong = await cdc(['decode', '--source', 'orders'], '');
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(
      /^cdc decode: --source is a source database URL \(cdc local, doctor, reconcile\); cdc decode takes the source id as --source-id$/m,
    );
    const bad = await cdc(['decode', '--source-id', 'Orders'], '');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^cdc decode: --source-id expects a lower-case identifier, got 'Orders'$/m);
  });

  it('--sort orders by position; --table-config masks and excludes', async () => {
    const config = path.join(tmp, 'tables.json');
    writeFileSync(config, JSON.stringify([{ table: 'public.foo', key: ['id'], mask: ['name'], exclude: ['attributes'] }]));
    const lines = readFileSync(path.join(root, 'test', 'fixtures', 'dms', 'postgres-session.jsonl'), 'utf8')
      .trim()
      .split('\n');
    const shuffled = [lines[6], lines[3], lines[5], lines[2], lines[4]].join('\n');
    const r = await cdc(['decode', '--sort', '--quiet', '--table-config', config], shuffled);
    expect(r.code).toBe(0);
    const out = events(r.stdout);
    expect(out.map((e) => e.position)).toEqual([...out.map((e) => e.position)].sort());
    expect(out.map((e) => `${e.op} ${JSON.stringify(e.key)}`)).toEqual([
      'snapshot {"id":42}',
      'insert {"id":46}',
      'update {"id":42}',
      'delete {"id":46}',
      'insert {"id":45}',
      'delete {"id":45}',
    ]);
    expect(out[1]!.after).toEqual({ age: 31, id: 46, name: maskValue('Jane') });
  });

  it('keeps integers beyond 2^53 and numerics exact: two distinct keys never collapse (docs/exact-numbers.md)', async () => {
    const rec = (id: string, amount: string, lsn: string): string =>
      `{"data":{"id":${id},"amount":${amount}},"metadata":{"timestamp":"2026-12-01T00:00:01.000000Z","record-type":"data","operation":"insert",` +
      `"partition-key-type":"schema-table","schema-name":"public","table-name":"big","commit-timestamp":"2026-12-01T00:00:00.000000Z",` +
      `"stream-position":"00000002/${lsn}.1.00000002/${lsn}","transaction-id":7,"transaction-record-id":1}}`;
    const input = `${rec('9007199254740993', '12.30', '7C000100')}\n${rec('9007199254740992', '123456789012345678901234567890.5', '7C000200')}\n`;
    const r = await cdc(['decode', '--key', 'public.big=id', '--quiet'], input);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = events(r.stdout);
    expect(out.map((e) => e.key)).toEqual([{ id: '9007199254740993' }, { id: '9007199254740992' }]);
    expect(out.map((e) => (e.after as Record<string, unknown>).amount)).toEqual(['12.30', '123456789012345678901234567890.5']);
    // the printed text itself carries every digit
    expect(r.stdout).toContain('"key":{"id":"9007199254740993"}');
  });

  it('usage errors exit 2', async () => {
    expect((await cdc(['decode', '--bogus'])).code).toBe(2);
    expect((await cdc(['decode', '--key', 'nodot=id'])).stderr).toMatch(/--key expects schema\.table=col1,col2/);
    expect((await cdc(['decode', path.join(tmp, 'missing.jsonl')])).stderr).toMatch(/cannot read .*missing\.jsonl/);
    expect((await cdc(['decode', '--table-config', path.join(tmp, 'missing.json')])).code).toBe(2);
    const unknown = await cdc(['frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command 'frobnicate'/);
    expect((await cdc([])).code).toBe(2);
  });

  it('--help documents the output shape and exits 0', async () => {
    const top = await cdc(['--help']);
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/decode +decode raw capture records/);
    const help = await cdc(['decode', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/"schemaVersion": null/);
    expect(help.stdout).toMatch(/line N: <reason>/);
  });
});
