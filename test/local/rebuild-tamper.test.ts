/**
 * Archive integrity on a rebuild (docs/rebuild.md, "Archive integrity") over real parts: embedded
 * PostgreSQL as the warehouse, kinesalite as the change log, a folder archive written by the
 * archive copier in the by-table layout. An intact archive rebuilds the table from its history;
 * an archive in which one table object was rewritten after the fact (a forged value in a valid
 * event, so nothing but the digest can tell) stops the rebuild with `ArchiveObjectTamperedError`
 * naming the object, and live is left as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { KinesisStreamEvent } from 'aws-lambda';
import { createStream } from '../helpers/kinesis-read.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { readChangeLog, type LogRecord } from '../../lambda/adapters/change-log-reader.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { Rebuilder } from '../../lambda/adapters/rebuilder.ts';
import { ReplayReader } from '../../lambda/adapters/replay-reader.ts';
import { createArchiveCopier } from '../../lambda/core/rebuild/archive.ts';
import { ArchiveObjectTamperedError } from '../../lambda/core/rebuild/archive-digest.ts';
import type { SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { FolderArchive } from '../../local/archive.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const TABLE = 'public.t';
const SINK = 'warehouse';

let cluster: PostgresCluster;
let pool: pg.Pool;
let kin: Kinesalite;
let kinesis: KinesisClient;
let dir: string;

beforeAll(async () => {
  [cluster, kin] = await Promise.all([startPostgres({ fast: true }), startKinesalite()]);
  await cluster.createDatabase('dw');
  pool = new pg.Pool({ connectionString: cluster.url('dw'), max: 4 });
  pool.on('error', () => undefined);
  kinesis = kinesisClient(kin.endpoint);
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-rebuild-tamper-'));
}, 120_000);

afterAll(async () => {
  await pool?.end();
  kinesis?.destroy();
  await kin?.stop();
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

function kinesisEvent(records: readonly LogRecord[]): KinesisStreamEvent {
  return {
    Records: records.map((r) => ({
      eventID: `${r.shardId}:${r.sequenceNumber}`,
      eventSource: 'aws:kinesis',
      eventVersion: '1.0',
      eventName: 'aws:kinesis:record',
      invokeIdentityArn: 'arn',
      awsRegion: 'us-east-1',
      eventSourceARN: 'arn:aws:kinesis:us-east-1:000000000000:stream/s',
      kinesis: {
        kinesisSchemaVersion: '1.0',
        partitionKey: 'k',
        sequenceNumber: r.sequenceNumber,
        data: Buffer.from(r.text).toString('base64'),
        approximateArrivalTimestamp: Date.parse('2026-12-01T10:00:00Z') / 1000,
      },
    })),
  } as KinesisStreamEvent;
}

/** A source whose table's whole history (inserts of ids 1..n with value `v<id>`) is in the stream and in the archive; live holds it merged. */
async function archivedTable(sourceId: string, n: number): Promise<{ cp: MemoryControlPlane; reader: ReplayReader; archive: FolderArchive }> {
  const at = new Date().toISOString();
  const cp = new MemoryControlPlane();
  const version: SchemaVersion = {
    source: sourceId,
    table: TABLE,
    version: 1,
    columns: [
      { name: 'id', type: 'integer', nullable: false },
      { name: 'v', type: 'text', nullable: true },
    ],
    key: ['id'],
    effectivePosition: '0'.repeat(24),
    registeredAt: at,
  };
  await cp.registerTable(
    { source: sourceId, table: TABLE, state: 'active', currentVersion: 1, deleteMode: 'hard', preImage: 'key', stateReason: null, updatedAt: at },
    version,
    { at, actor: 'test', action: 'register-table', source: sourceId, table: TABLE, outcome: 'done', detail: {} },
  );
  const events: ChangeEvent[] = [];
  for (let id = 1; id <= n; id++) {
    events.push({
      v: ENVELOPE_VERSION,
      source: sourceId,
      table: TABLE,
      op: 'insert',
      key: { id },
      after: { id, v: `v${id}` },
      before: null,
      missing: [],
      position: makePosition(0x100n + BigInt(id), 0),
      commitTs: at,
      txId: String(id),
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    });
  }
  const stream = `tamper-${sourceId}`;
  await createStream(kinesis, stream, 2);
  await kinesis.send(
    new PutRecordsCommand({ StreamName: stream, Records: events.map((e) => ({ PartitionKey: `${e.key.id}`, Data: Buffer.from(JSON.stringify(e)) })) }),
  );
  const archive = new FolderArchive(path.join(dir, sourceId));
  const copy = createArchiveCopier({ archive, layout: 'by-table' });
  const byShard = new Map<string, LogRecord[]>();
  for await (const page of readChangeLog(kinesis, stream)) for (const r of page) byShard.set(r.shardId, [...(byShard.get(r.shardId) ?? []), r]);
  for (const records of byShard.values()) for (let i = 0; i < records.length; i += 4) await copy(kinesisEvent(records.slice(i, i + 4)));
  const live = new PgWarehouse(pool);
  await live.applyTable({ source: sourceId, table: TABLE, deleteMode: 'hard', schemas: new Map([[1, version]]), events, appliedAt: new Date() });
  await cp.advanceSinkProgress(SINK, sourceId, TABLE, events[events.length - 1]!.position);
  await live.merge({ source: sourceId, table: TABLE, deleteMode: 'hard', key: ['id'] });
  return { cp, reader: new ReplayReader({ archive, kinesis, stream }), archive };
}

async function rows(sourceId: string): Promise<string[]> {
  return (await pool.query(`SELECT id, v FROM "${sourceId}_public".t ORDER BY id`)).rows.map((r: { id: string; v: string | null }) => `${r.id}=${r.v}`);
}

describe('rebuild verifies every archive object against the digest recorded when it was written', () => {
  it('an intact archive rebuilds as before, every table object verified', async () => {
    const source = 'intact';
    const { cp, reader } = await archivedTable(source, 20);
    await pool.query(`UPDATE "${source}_public"._cdc_mirror_t SET v = 'CORRUPT' WHERE id = 3`);
    const rebuilder = new Rebuilder({ controlPlane: cp, pool, reader, duty: 1, batchSize: 7 });
    const c = await rebuilder.check({ source, table: TABLE, sink: SINK });
    if (c.refusal !== null) throw new Error(`refused: ${c.refusal.reason}`);
    const read = await reader.read({ source, table: TABLE, from: '0'.repeat(24), to: 'f'.repeat(24) }, c.history);
    expect(read.stats.unverifiedObjects).toBe(0);
    expect(read.stats.verifiedObjects).toBe(read.stats.objectsRead);
    expect(read.stats.objectsRead).toBeGreaterThan(2);
    // One marker GET per batch the table has objects in (here every batch holds only this table).
    expect(read.stats.markersRead).toBe(read.stats.objectsRead);
    console.log(`rebuild-tamper: ${read.stats.objectsRead} objects verified with ${read.stats.markersRead} marker reads`);
    const report = await rebuilder.run({ source, table: TABLE, sink: SINK, rehearse: false, actor: 'test' }, c.history);
    expect(report.diff.map((d) => `${d.kind}:${d.key.id}`)).toEqual(['changed:3']);
    expect(await rows(source)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1).map((id) => `${id}=v${id}`));
  }, 120_000);

  it('an object rewritten after the fact stops the rebuild with ArchiveObjectTamperedError naming it; live is untouched', async () => {
    const source = 'forged';
    const { cp, reader, archive } = await archivedTable(source, 20);
    // Rewrite one table object: the same valid events, one value forged.
    const objects = await archive.list('change-log/tables/forged/');
    expect(objects.length).toBeGreaterThan(1);
    const victim = objects[Math.floor(objects.length / 2)]!;
    const file = path.join(archive.root, victim);
    const text = await readFile(file, 'utf8');
    const forged = text.replace(/"v":"v(\d+)"/, '"v":"FORGED"');
    expect(forged).not.toBe(text);
    await writeFile(file, forged);
    const before = await rows(source);

    const rebuilder = new Rebuilder({ controlPlane: cp, pool, reader, duty: 1, batchSize: 7 });
    const c = await rebuilder.check({ source, table: TABLE, sink: SINK });
    if (c.refusal !== null) throw new Error(`refused: ${c.refusal.reason}`);
    const err = await rebuilder.run({ source, table: TABLE, sink: SINK, rehearse: false, actor: 'test' }, c.history).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ArchiveObjectTamperedError);
    expect((err as ArchiveObjectTamperedError).code).toBe('ARCHIVE_OBJECT_TAMPERED');
    expect((err as ArchiveObjectTamperedError).key).toBe(victim);
    expect((err as Error).message).toContain(victim);
    expect(await rows(source)).toEqual(before);
    expect(before.some((r) => r.includes('FORGED'))).toBe(false);
  }, 120_000);
});
