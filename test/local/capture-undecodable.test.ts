/**
 * The undecodable-record stop of the local capture, end to end on embedded PostgreSQL
 * (docs/failures.md, "Output of test_decoding the capture cannot parse"): PostgreSQL itself
 * prints a change the capture cannot parse, and the capture must stop loudly with
 * `CaptureUndecodableError (CAPTURE_UNDECODABLE)`, keep a dead letter and an audit entry, never
 * acknowledge the slot past it, stop at the same place on every restart, and deliver the change
 * once the cause is fixed (nothing was acked, so nothing is lost).
 *
 * The real trigger: `quote_all_identifiers = on` in the capture's session (here set on the
 * database, as an operator might) makes `test_decoding` print the type of an `oid` column as
 * `"oid"` (format_type quotes the one unquoted-value type it does not spell out itself), with
 * the value unquoted, which the parser refuses (an unquoted value of a type it does not know).
 *
 * And a control-plane record the capture cannot decode: a recorded source identity that is not
 * one stops the start with `INVALID_IDENTITY` naming the item, before anything is acknowledged.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { SlotCapture, captureCheckpointName, type CaptureOptions } from '../../local/capture.ts';
import { CaptureUndecodableError } from '../../local/capture-poison.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { readSlot } from '../../local/slot.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until, capturedViews } from './helpers.ts';
import { identityCheckpoint } from '../../local/capture-continuity.ts';
import { CdcError } from '../../lambda/core/shared/errors.ts';
import { CheckId } from '../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../lambda/core/operator/doctor.ts';
import { gatherSourceFacts } from '../../lambda/adapters/source-facts-pg.ts';

let cluster: PostgresCluster;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
}, 120_000);
afterAll(async () => {
  await cluster?.stop();
});

const failure = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

describe('a change the capture cannot decode', () => {
  it('stops loudly without acking it, stops there again on restart, and delivers it once the cause is fixed', async () => {
    const source = 'undec';
    await cluster.createDatabase(source);
    const sql = new pg.Client({ connectionString: cluster.url(source) });
    sql.on('error', () => undefined);
    await sql.connect();
    await sql.query('CREATE TABLE public.files (id int PRIMARY KEY, blob oid, name text)');
    const controlPlane = new MemoryControlPlane();
    const published: SlotRecord[] = [];
    const errors: unknown[] = [];
    const options: CaptureOptions = {
      source,
      sourceUrl: cluster.url(source),
      tables: new TableConfigIndex([{ table: 'public.files', deleteMode: 'soft', mask: [], exclude: [] }]),
      controlPlane,
      publish: async (records) => void published.push(...records.flatMap((r) => capturedViews(r.data))),
      idleMs: 20,
      onError: (e) => errors.push(e),
    };
    // What cdc doctor (and cdc local before it starts) says of the capture user's sessions, on the real source.
    const doctor = async (): Promise<string | undefined> => {
      const c = new pg.Client({ connectionString: cluster.url(source) });
      await c.connect();
      try {
        return runChecks(await gatherSourceFacts(c, { tables: [] })).find((r) => r.check === CheckId.DECODING_SETTINGS)?.status;
      } finally {
        await c.end();
      }
    };
    expect(await doctor()).toBe('PASS');
    const checkpointOf = () => controlPlane.getCheckpoint(captureCheckpointName(source), `cdc_${source}`);

    // Decodable first: one change goes through and is acknowledged.
    const first = new SlotCapture(options);
    await first.start();
    await sql.query("INSERT INTO files VALUES (1, 1001, 'one')");
    await until('the first change', () => published.length === 1);
    await first.stop();
    const acked = await checkpointOf();
    expect((await readSlot(sql, first.slot))!.confirmedFlushLsn).toBe(acked);

    // The capture's sessions now make test_decoding print what the parser cannot read.
    await sql.query(`ALTER DATABASE ${source} SET quote_all_identifiers = on`);
    expect(await doctor()).toBe('FAIL');
    await sql.query("INSERT INTO files VALUES (2, 1002, 'two')");
    await sql.query("INSERT INTO files VALUES (3, 1003, 'three')");

    for (let attempt = 1; attempt <= 2; attempt++) {
      const c = new SlotCapture(options);
      await c.start();
      const stopped = await failure(c.done);
      // A named, loud stop: not a silent skip, not a retry loop.
      expect(stopped, `attempt ${attempt}`).toBeInstanceOf(CaptureUndecodableError);
      expect((stopped as CaptureUndecodableError).code).toBe('CAPTURE_UNDECODABLE');
      expect((stopped as Error).message).toContain('"oid"');
      expect(c.stats.state).toBe('failed');
      // Nothing of it (nor after it) published or acknowledged.
      expect(published).toHaveLength(1);
      expect(await checkpointOf()).toBe(acked);
      expect((await readSlot(sql, c.slot))!.confirmedFlushLsn).toBe(acked);
      // A dead letter of the line (the table has no column rules, so the line is kept) and an audit entry, each time.
      const letters = await controlPlane.listDeadLetters('capture');
      expect(letters).toHaveLength(attempt);
      expect(letters[attempt - 1]).toMatchObject({ stage: 'capture', source, table: 'public.files', code: 'CAPTURE_UNDECODABLE' });
      expect(letters[attempt - 1]!.record).toContain('table "public"."files": INSERT:');
      expect(letters[attempt - 1]!.record).toContain('"blob"["oid"]:1002');
      expect((await controlPlane.listAudit(source)).filter((a) => a.action === 'capture-stopped')).toHaveLength(attempt);
    }

    // Recovery (docs/failures.md): the cause is a setting of the capture's session; reset it and
    // start again. The changes were never acknowledged, so they are all still in the slot.
    await sql.query(`ALTER DATABASE ${source} RESET quote_all_identifiers`);
    expect(await doctor()).toBe('PASS');
    const fixed = new SlotCapture(options);
    await fixed.start();
    await until('the changes held behind the stop', () => published.length === 3);
    await fixed.stop();
    expect(published.map((r) => r.columns!.find((col) => col.name === 'id')!.value)).toEqual([1, 2, 3]);
    expect(published[1]!.columns!.find((col) => col.name === 'blob')).toEqual({ name: 'blob', type: '', value: 1002 });
    const after = await checkpointOf();
    expect(after).not.toBe(acked);
    expect((await readSlot(sql, fixed.slot))!.confirmedFlushLsn).toBe(after);
    await sql.end();
  }, 90_000);

  it('stops on start with INVALID_IDENTITY naming the item when the recorded source identity cannot be read (corrupt control state), acking nothing', async () => {
    const source = 'corrupt';
    await cluster.createDatabase(source);
    const sql = new pg.Client({ connectionString: cluster.url(source) });
    sql.on('error', () => undefined);
    await sql.connect();
    await sql.query('CREATE TABLE public.t (id int PRIMARY KEY)');
    const controlPlane = new MemoryControlPlane();
    const published: SlotRecord[] = [];
    const options: CaptureOptions = {
      source,
      sourceUrl: cluster.url(source),
      tables: new TableConfigIndex([{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }]),
      controlPlane,
      publish: async (records) => void published.push(...records.flatMap((r) => capturedViews(r.data))),
      idleMs: 20,
    };
    const first = new SlotCapture(options);
    await first.start();
    await first.stop();
    const acked = await controlPlane.getCheckpoint(captureCheckpointName(source), first.slot);
    await sql.query('INSERT INTO t VALUES (1)');
    const [consumer, shard] = identityCheckpoint(source);
    await controlPlane.putCheckpoint(consumer, shard, 'not-an-identity');
    const error = await failure(new SlotCapture(options).start());
    expect(error).toBeInstanceOf(CdcError);
    expect(error).toMatchObject({ code: 'INVALID_IDENTITY' });
    expect((error as Error).message).toContain(`${consumer}/${shard}`);
    expect((error as Error).message).toContain('"not-an-identity"');
    expect(published).toEqual([]);
    expect((await readSlot(sql, first.slot))!.confirmedFlushLsn).toBe(acked);
    await sql.end();
  });
});
