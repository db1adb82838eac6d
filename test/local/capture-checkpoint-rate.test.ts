/**
 * The streaming capture writes its checkpoint at most once a second (docs/local.md, "The capture's
 * checkpoint written at most once a second"), against embedded PostgreSQL and the DynamoDB control
 * plane on DynamoDB Local: many small batches a second cost a bounded number of checkpoint writes;
 * a caught-up capture and a clean stop have the checkpoint and the slot at the last published
 * commit; a crash while published batches wait re-reads them on restart (more replay, never a loss).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { SlotCapture, captureCheckpointName, type CaptureOptions } from '../../local/capture.ts';
import { readSlot } from '../../local/slot.ts';
import { until, capturedViews } from './helpers.ts';

let cluster: PostgresCluster;
let ddb: DynamoDbLocal;
let controlPlane: DynamoDbControlPlane;
/** PutItem requests on the capture's checkpoint items (`CHECKPOINT#capture:…`), as sent. */
let capturePuts = 0;
let n = 0;

beforeAll(async () => {
  [cluster, ddb] = await Promise.all([startPostgres({ fast: true }), startDynamoDbLocal({ jvmOptions: QUICK_START_JVM_OPTIONS })]);
  const dynamo = dynamoDbClient(ddb.endpoint);
  dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'PutItemCommand' && JSON.stringify(args.input).includes('CHECKPOINT#capture:')) capturePuts++;
      return next(args);
    },
    { step: 'initialize', name: 'countCapturePuts' },
  );
  await createControlTable(dynamo, 'control');
  controlPlane = new DynamoDbControlPlane(dynamo, 'control');
});

afterAll(async () => {
  await Promise.all([cluster?.stop(), ddb?.stop()]);
});

async function env(): Promise<{ source: string; sql: pg.Client; published: SlotRecord[]; options: CaptureOptions }> {
  const source = `rate${++n}`;
  await cluster.createDatabase(source);
  const sql = new pg.Client({ connectionString: cluster.url(source) });
  sql.on('error', () => undefined);
  await sql.connect();
  await sql.query('CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)');
  const published: SlotRecord[] = [];
  const options: CaptureOptions = {
    source,
    sourceUrl: cluster.url(source),
    tables: new TableConfigIndex([{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }]),
    controlPlane,
    publish: async (records) => void published.push(...records.flatMap((r) => capturedViews(r.data))),
    // One row a batch: every transaction below is a batch of its own.
    peekChanges: 1,
    idleMs: 20,
  };
  return { source, sql, published, options };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const lastCommit = (records: SlotRecord[]): string => records[records.length - 1]!.commitLsn;

describe('the capture checkpoint, streaming', () => {
  it('many batches a second cost at most two checkpoint writes a second; caught up and a clean stop leave checkpoint and slot at the last commit', async () => {
    const e = await env();
    const capture = new SlotCapture(e.options);
    await capture.start();
    const putsBefore = capturePuts;
    const t0 = Date.now();
    for (let i = 1; i <= 60; i++) {
      await e.sql.query('INSERT INTO t VALUES ($1, 1)', [i]);
      await sleep(20);
    }
    await until('all published', () => e.published.length === 60);
    const seconds = (Date.now() - t0) / 1000;
    const batchPuts = capturePuts - putsBefore;
    // Two writes (the checkpoint, where the slot was moved) per written position: one a second, the first at once.
    expect(batchPuts, `${batchPuts} checkpoint writes for 60 batches in ${seconds.toFixed(1)} s`).toBeLessThanOrEqual(2 * (Math.ceil(seconds) + 1));
    const since = Date.now();
    await until('caught up', () => capture.caughtUpSince(since));
    const name = captureCheckpointName(e.source);
    expect(await controlPlane.getCheckpoint(name, capture.slot)).toBe(lastCommit(e.published));
    expect((await readSlot(e.sql, capture.slot))!.confirmedFlushLsn).toBe(lastCommit(e.published));
    // Published since, then a clean stop, nobody asking whether it caught up: the stop writes it.
    await e.sql.query('INSERT INTO t VALUES (61, 1), (62, 1)');
    await until('the last insert published', () => e.published.length === 62);
    await capture.stop();
    expect(capture.stats.records).toBe(62);
    expect(await controlPlane.getCheckpoint(name, capture.slot)).toBe(lastCommit(e.published));
    expect((await readSlot(e.sql, capture.slot))!.confirmedFlushLsn).toBe(lastCommit(e.published));
    await e.sql.end();
  });

  it('a crash while published batches wait for their checkpoint re-reads them on restart: more replay, nothing lost', async () => {
    const e = await env();
    const first = new SlotCapture(e.options);
    await first.start();
    await e.sql.query('INSERT INTO t VALUES (1, 1)');
    const since = Date.now();
    await until('caught up', () => first.caughtUpSince(since));
    await first.stop();
    const written = lastCommit(e.published);
    // A capture that would write only after a minute: ten batches published, then the process dies
    // (hung in the eleventh publish, its sessions ended).
    let own = 0;
    let hung = false;
    const waiting = new SlotCapture({
      ...e.options,
      checkpointIntervalMs: 60_000,
      publish: async (records) => {
        if (++own > 10) {
          hung = true;
          return new Promise<never>(() => undefined);
        }
        await e.options.publish(records);
      },
    });
    await waiting.start();
    for (let i = 2; i <= 12; i++) await e.sql.query('INSERT INTO t VALUES ($1, 1)', [i]);
    await until('ten more published, the eleventh hung', () => e.published.length === 11 && hung);
    const name = captureCheckpointName(e.source);
    expect(await controlPlane.getCheckpoint(name, waiting.slot)).toBe(written);
    expect((await readSlot(e.sql, waiting.slot))!.confirmedFlushLsn).toBe(written);
    await e.sql.query('SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()', [
      `cdc-local-capture-${e.source}`,
    ]);
    await until('the crashed capture let the slot go', async () => !(await readSlot(e.sql, waiting.slot))!.active);
    const crashedAt = e.published.length;
    const again = new SlotCapture(e.options);
    await again.start();
    const t1 = Date.now();
    await until('caught up after the restart', () => again.caughtUpSince(t1));
    await again.stop();
    // The ten waiting batches were published again, in order, at the same positions, then the next one.
    const replay = e.published.slice(crashedAt).map((r) => `${r.commitLsn}#${r.index} ${String(r.columns![0]!.value)}`);
    const before = e.published.slice(1, 11).map((r) => `${r.commitLsn}#${r.index} ${String(r.columns![0]!.value)}`);
    expect(replay.slice(0, 10)).toEqual(before);
    expect(replay.slice(10).map((x) => x.split(' ')[1])).toEqual(['12']);
    expect(await controlPlane.getCheckpoint(name, again.slot)).toBe(lastCommit(e.published));
    await e.sql.end();
  });
});
