/**
 * End to end, through the `cdc` command: `cdc local --demo --warehouse-engine redshift` runs the
 * whole local pipeline with the warehouse sink loaded the Redshift way (docs/local.md, "The
 * Redshift stand-in"): staged gzip CSV objects and manifests in the state folder's S3 stand-in, one
 * loader session running `COPY … MANIFEST` into the changelogs, through the Redshift stand-in (a
 * run this short ends before a merge is due: the view overlays the changelog; merges under crashes
 * are test/adapters/warehouse-redshift.test.ts's). The bounded run's verdict compares every captured table of the source with
 * its Redshift view row by row and must be MATCH. Then the warehouse itself is looked at: the loads
 * ledger names committed loads, the staged objects are where the ledger says, the Redshift layout
 * (changelog with `_cdc_load`, watermarks) is what was written, not the PostgreSQL one.
 */
import { stopCdcProcess } from '../helpers/cdc-cli.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState, WAREHOUSE_DATABASE, type LocalState } from '../../local/stack.ts';
import { FolderArchive } from '../../local/archive.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let stateDir: string;
let child: ChildProcess | null = null;
let cluster: PostgresCluster | null = null;

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-rs-'));
});

afterAll(async () => {
  if (child) await stopCdcProcess(child);
  await cluster?.stop().catch(() => undefined);
  if (stateDir) await resetLocalState(stateDir).catch(() => rm(stateDir, { recursive: true, force: true }));
});

describe('cdc local --warehouse-engine redshift, end to end', () => {
  it('runs the demo through the Redshift stand-in to a row-by-row MATCH', async () => {
    // Small and bounded: no seed rows (no snapshot), a short workload, the search sink off (another test's).
    const c = spawn(
      process.execPath,
      [
        CLI,
        'local',
        '--demo',
        '--warehouse-engine',
        'redshift',
        '--no-search',
        '--state-dir',
        stateDir,
        '--fast',
        '--rate',
        '30',
        '--no-snapshot',
        '--duration',
        '15s',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = c;
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => c.on('exit', (x) => resolve(x)));
    child = null;
    await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(stateDir, { source: 'demo' }));
    for (const t of ['public.customers', 'public.orders', 'public.documents', 'public.cdc_heartbeat'])
      expect(out).toMatch(new RegExp(`ok +${t.replace('.', '\\.')}:`));
    expect(code, out).toBe(0);

    // The warehouse holds the Redshift layout, written by loads the ledger records.
    const state = JSON.parse(readFileSync(path.join(stateDir, 'state.json'), 'utf8')) as LocalState;
    cluster = await startPostgres({ dataDir: state.postgresDataDir!, persistent: true });
    const client = new pg.Client({ host: '127.0.0.1', port: cluster.port, user: 'postgres', database: WAREHOUSE_DATABASE });
    await client.connect();
    try {
      const loads = (
        await client.query<{ load_id: string; load_key: string; events: string; objects: number }>('SELECT * FROM warehouse_loads._cdc_loads ORDER BY load_id')
      ).rows;
      expect(loads.length).toBeGreaterThan(1);
      // Many tables' objects per load: fewer loads than batches would have been sessions.
      const events = loads.reduce((n, l) => n + Number(l.events), 0);
      const changelog = await client.query<{ n: string; loads: string; min: string }>(
        'SELECT count(*) AS n, count(DISTINCT _cdc_load) AS loads, min(_cdc_load) AS min FROM demo_public._cdc_changelog_orders',
      );
      expect(Number(changelog.rows[0]!.n)).toBeGreaterThan(0);
      expect(events).toBeGreaterThanOrEqual(Number(changelog.rows[0]!.n));
      // Every load's objects are in the S3 stand-in, under the key the ledger names.
      const archive = new FolderArchive(path.join(stateDir, 'archive'));
      const staged = await archive.list('staging/warehouse/loads/');
      for (const l of loads) expect(staged.some((k) => k.startsWith(`${l.load_key}/`) && k.endsWith('.csv.gz'))).toBe(true);
      // No delta table: the PostgreSQL layout was not written.
      const delta = await client.query("SELECT 1 FROM pg_class WHERE relname = '_cdc_delta_orders'");
      expect(delta.rowCount).toBe(0);
      const wm = await client.query<{ table_name: string; merged_load: string }>('SELECT table_name, merged_load FROM demo_public._cdc_watermarks');
      expect(wm.rows.map((r) => r.table_name).sort()).toEqual(['cdc_heartbeat', 'customers', 'documents', 'orders']);
    } finally {
      await client.end();
    }
  }, 240_000);
});
