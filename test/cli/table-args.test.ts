import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseDoctorArgs } from '../../bin/cli/doctor.ts';
import { parseLocalArgs } from '../../bin/cli/local-args.ts';
import { parseExcludeTablesOption, parseTablesOption, tableSettingEntries } from '../../bin/cli/table-args.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-table-args-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the options that name captured tables (cdc local, cdc doctor)', () => {
  it('parse --tables and --exclude-tables the same way in both commands', () => {
    expect(parseTablesOption(' public.a, sales.* ,')).toEqual(['public.a', 'sales.*']);
    expect(() => parseTablesOption('public.a,nodot')).toThrow("--tables expects schema.table names or patterns (public.*), got 'nodot'");
    expect(() => parseExcludeTablesOption('public.audit_*,x')).toThrow("--exclude-tables expects schema.table patterns (public.audit_*), got 'x'");
    const args = ['--source', 'postgres://u@h/db', '--tables', 'public.*', '--exclude-tables', 'public.audit_*'];
    expect(parseLocalArgs(args)).toMatchObject({ tables: ['public.*'], excludeTables: ['public.audit_*'] });
    expect(parseDoctorArgs(args)).toMatchObject({ tables: ['public.*'], excludeTables: ['public.audit_*'] });
    expect(() => parseDoctorArgs(['--source', 'x', '--tables', 'nodot'])).toThrow(/--tables expects/);
  });

  it('merge the table-config file with --tables: the file first, a rule per pattern, names the file lacks', async () => {
    const file = path.join(dir, 'tables.json');
    writeFileSync(file, JSON.stringify([{ table: 'public.a', snapshot: false }]));
    const { entries, origin } = await tableSettingEntries({ tables: ['public.a', 'public.b', 'sales.*'], excludeTables: ['sales.tmp_*'], tableConfig: file });
    expect(origin).toBe(file);
    expect(entries).toEqual([{ table: 'public.a', snapshot: false }, { table: 'public.b' }, { match: 'sales.*', excludeTables: ['sales.tmp_*'] }]);
    expect(await tableSettingEntries({ tables: ['public.b'], excludeTables: [], tableConfig: null })).toEqual({
      entries: [{ table: 'public.b' }],
      origin: '--tables',
    });
  });

  it('name the file and the problem when the table-config file is unreadable or not an array', async () => {
    const notArray = path.join(dir, 'object.json');
    writeFileSync(notArray, '{"table":"public.a"}');
    await expect(tableSettingEntries({ tables: [], excludeTables: [], tableConfig: notArray })).rejects.toThrow(
      `--table-config ${notArray}: expected a JSON array of table settings`,
    );
    const broken = path.join(dir, 'broken.json');
    writeFileSync(broken, '[{');
    await expect(tableSettingEntries({ tables: [], excludeTables: [], tableConfig: broken })).rejects.toThrow(`--table-config ${broken}:`);
    await expect(tableSettingEntries({ tables: [], excludeTables: [], tableConfig: path.join(dir, 'absent.json') })).rejects.toThrow(/ENOENT/);
  });
});

describe('cdc local --slot-read', () => {
  const base = ['--source', 'postgres://u@h/db', '--tables', 'public.a'];
  it('streams the slot by default, peeks with SQL when asked, and refuses anything else', () => {
    expect(parseLocalArgs(base).slotRead).toBe('stream');
    expect(parseLocalArgs([...base, '--slot-read', 'peek']).slotRead).toBe('peek');
    expect(parseLocalArgs([...base, '--slot-read', 'stream']).slotRead).toBe('stream');
    expect(() => parseLocalArgs([...base, '--slot-read', 'fast'])).toThrow("--slot-read expects stream or peek, got 'fast'");
    expect(() => parseLocalArgs([...base, '--slot-read'])).toThrow('--slot-read needs a value');
  });
});
