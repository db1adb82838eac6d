/**
 * The normalizer handler end to end on the local stand-ins: raw records are put on a kinesalite
 * raw stream, read back with GetRecords and turned into the KinesisStreamEvent Lambda delivers;
 * the handler publishes to a kinesalite change log and keeps its registry in DynamoDB Local.
 * Metrics are read from the Embedded Metric Format lines the handler prints (CloudWatch itself
 * has no local stand-in).
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { randomUUID } from 'node:crypto';
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { KinesisStreamEvent } from 'aws-lambda';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { KinesisChangeLog, sha256Hex } from '../../lambda/adapters/change-log-kinesis.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { createNormalizerHandler, type NormalizerHandler } from '../../lambda/handlers/normalizer.ts';
import { catalogTypesSetting } from '../../lambda/runtime/environment.ts';
import { publishCatalogTypes } from '../../lambda/core/shared/catalog-types.ts';
import type { ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { partitionKeyOf, validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { createStream, readJson, readShards } from '../helpers/kinesis-read.ts';

let ddb: DynamoDbLocal;
let kin: Kinesalite;
let dynamo: DynamoDBClient;
let kinesis: KinesisClient;

beforeAll(async () => {
  [ddb, kin] = await Promise.all([startDynamoDbLocal(), startKinesalite()]);
  dynamo = dynamoDbClient(ddb.endpoint);
  kinesis = kinesisClient(kin.endpoint);
});
afterAll(async () => {
  dynamo?.destroy();
  kinesis?.destroy();
  await Promise.all([ddb?.stop(), kin?.stop()]);
});

// ---- output capture: EMF metric lines and Powertools log lines (warnings and errors on stderr) --
let stdout: string[] = [];
beforeEach(() => {
  stdout = [];
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream);
    vi.spyOn(stream, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      if (text.trimStart().startsWith('{')) {
        stdout.push(...text.split('\n').filter((l) => l.trim() !== ''));
        return true;
      }
      return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
    });
  }
});
afterEach(() => {
  vi.restoreAllMocks();
});

interface Emf {
  _aws: { CloudWatchMetrics: Array<{ Namespace: string; Dimensions: string[][]; Metrics: Array<{ Name: string; Unit: string }> }> };
  [k: string]: unknown;
}
function emf(): Emf[] {
  return stdout.map((l) => JSON.parse(l) as Record<string, unknown>).filter((o): o is Emf => typeof o._aws === 'object');
}
/** Sum of a count metric over every EMF record, with the dimension values each record carried. */
function metricSum(name: string, dims: Record<string, string> = {}): number {
  let sum = 0;
  for (const r of emf()) {
    const def = r._aws.CloudWatchMetrics[0]!;
    if (!def.Metrics.some((m) => m.Name === name)) continue;
    if (Object.entries(dims).some(([k, v]) => r[k] !== v || !def.Dimensions.some((d) => d.includes(k)))) continue;
    const v = r[name];
    sum += Array.isArray(v) ? v.reduce((a: number, b: number) => a + b, 0) : Number(v);
  }
  return sum;
}
function logLines(): Array<Record<string, unknown>> {
  return stdout.map((l) => JSON.parse(l) as Record<string, unknown>).filter((o) => typeof o.message === 'string');
}

// ---- raw records ----------------------------------------------------------------------------
type Col = [name: string, type: string, value: unknown];
function slot(o: {
  lsn: number;
  index?: number;
  table?: string;
  op?: 'insert' | 'update' | 'delete' | 'truncate';
  columns?: Col[] | null;
  oldKey?: Col[] | null;
  unchanged?: string[];
  unchangedTypes?: Record<string, string>;
  key?: string[];
  source?: string;
}) {
  const op = o.op ?? 'insert';
  const toCols = (cs: Col[]) => cs.map(([name, type, value]) => ({ name, type, value }));
  return {
    format: 'cdc-slot/1',
    source: o.source ?? 'shop',
    xid: String(500 + o.lsn),
    commitLsn: `0/${(0x1000 + o.lsn * 0x100).toString(16).toUpperCase()}`,
    commitTs: '2026-11-29T10:00:00.000Z',
    index: o.index ?? 0,
    table: o.table ?? 'public.items',
    op,
    key: op === 'truncate' ? [] : (o.key ?? ['id']),
    columns: o.columns === undefined ? null : o.columns === null ? null : toCols(o.columns),
    oldKey: o.oldKey ? toCols(o.oldKey) : null,
    unchanged: o.unchanged ?? [],
    ...(o.unchangedTypes ? { unchangedTypes: o.unchangedTypes } : {}),
  };
}
const slotPos = (lsn: number, index = 0) => makePosition(BigInt(0x1000 + lsn * 0x100), index);

function dms(op: 'insert' | 'update' | 'delete' | 'load', table: string, data: Record<string, unknown>, lsn: number, extra: Record<string, unknown> = {}) {
  const [schema, name] = table.split('.');
  const lsnText = `00000000/${(0x2000 + lsn * 0x10).toString(16).toUpperCase().padStart(8, '0')}`;
  return {
    data,
    metadata: {
      timestamp: '2026-11-29T10:00:01.000Z',
      'record-type': 'data',
      operation: op,
      'partition-key-type': 'schema-table',
      'schema-name': schema,
      'table-name': name,
      'commit-timestamp': '2026-11-29T10:00:00.000Z',
      'stream-position': `${lsnText}.3.${lsnText}`,
      'transaction-id': 1000 + lsn,
      'transaction-record-id': 1,
    },
    ...extra,
  };
}
const dmsPos = (lsn: number) => makePosition(BigInt(0x2000 + lsn * 0x10), 1);

function dmsControl(operation: string, table: string, tableDef?: { columns: Record<string, { type: string; nullable: boolean }>; 'primary-key'?: string[] }) {
  const [schema, name] = table.split('.');
  return {
    control: tableDef ? { 'table-def': tableDef } : {},
    metadata: {
      timestamp: '2026-11-29T10:00:02.000Z',
      'record-type': 'control',
      operation,
      'partition-key-type': 'task-id',
      'partition-key-value': 'TASK',
      'schema-name': schema,
      'table-name': name,
    },
  };
}

// ---- pipeline -------------------------------------------------------------------------------
interface Pipeline {
  controlPlane: DynamoDbControlPlane;
  raw: string;
  rawArn: string;
  log: string;
  handler: NormalizerHandler;
  build(o?: { controlPlane?: ControlPlane; log?: string; flushEvents?: number; catalogTypes?: boolean }): NormalizerHandler;
}

const TABLES: TableConfig[] = [
  { table: 'public.orders', key: ['id'], deleteMode: 'hard', mask: [], exclude: [] },
  { table: 'public.lines', key: ['order_id', 'line'], deleteMode: 'soft', mask: [], exclude: [] },
];

async function pipeline(): Promise<Pipeline> {
  const id = randomUUID().slice(0, 8);
  const tableName = `ctl-${id}`;
  await createControlTable(dynamo, tableName);
  const controlPlane = new DynamoDbControlPlane(dynamo, tableName);
  const raw = `raw-${id}`;
  const log = `log-${id}`;
  const [rawArn] = await Promise.all([createStream(kinesis, raw, 1), createStream(kinesis, log, 2)]);
  const build = (o: { controlPlane?: ControlPlane; log?: string; flushEvents?: number; catalogTypes?: boolean } = {}) =>
    createNormalizerHandler({
      source: 'shop',
      tables: TABLES,
      controlPlane: o.controlPlane ?? controlPlane,
      changeLog: new KinesisChangeLog(kinesis, o.log ?? log, { maxAttempts: 2, baseDelayMs: 1 }),
      ...(o.flushEvents ? { flushEvents: o.flushEvents } : {}),
      ...(o.catalogTypes ? { catalogTypes: true } : {}),
    });
  return { controlPlane, raw, rawArn, log, handler: build(), build };
}

/** Puts raw payloads (objects as JSON, strings as they are) on the raw stream and returns the Lambda event for exactly them. */
async function rawEvent(p: Pipeline, payloads: unknown[]): Promise<KinesisStreamEvent> {
  const before = (await readShards(kinesis, p.raw)).get('shardId-000000000000')?.length ?? 0;
  await kinesis.send(
    new PutRecordsCommand({
      StreamName: p.raw,
      Records: payloads.map((x, i) => ({ PartitionKey: `p${i}`, Data: Buffer.from(typeof x === 'string' ? x : JSON.stringify(x)) })),
    }),
  );
  const records = (await readShards(kinesis, p.raw)).get('shardId-000000000000')!.slice(before);
  expect(records).toHaveLength(payloads.length);
  return toKinesisStreamEvent(records, { streamArn: p.rawArn, shardId: 'shardId-000000000000' });
}

/** Every event on the change log (validated), with partition keys checked, in per-shard order. */
async function published(p: Pipeline): Promise<ChangeEvent[]> {
  const out: ChangeEvent[] = [];
  for (const records of (await readJson<unknown>(kinesis, p.log)).values()) {
    for (const r of records) {
      const e = validateChangeEvent(r.value);
      expect(r.partitionKey).toBe(partitionKeyOf(e, sha256Hex));
      out.push(e);
    }
  }
  return out.sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
}

// ---- tests ----------------------------------------------------------------------------------
describe('normalizer handler: DMS records', () => {
  it('registers a table on first sight with the configured key and delete mode, and publishes in order', async () => {
    const p = await pipeline();
    const event = await rawEvent(p, [
      dms('insert', 'public.orders', { id: 1, status: 'new' }, 1),
      dms('update', 'public.orders', { id: 1, status: 'paid' }, 2),
      dms('insert', 'public.orders', { id: 2, status: 'new' }, 3),
      dms('delete', 'public.orders', { id: 1, status: null }, 4),
    ]);
    expect(await p.handler(event)).toEqual({ batchItemFailures: [] });

    const table = await p.controlPlane.getTable('shop', 'public.orders');
    expect(table).toMatchObject({ state: 'active', currentVersion: 1, deleteMode: 'hard', preImage: 'key' });
    const v1 = await p.controlPlane.getSchemaVersion('shop', 'public.orders', 1);
    expect(v1).toMatchObject({
      key: ['id'],
      effectivePosition: dmsPos(1),
      columns: [
        { name: 'id', type: null, nullable: true },
        { name: 'status', type: null, nullable: true },
      ],
    });
    expect((await p.controlPlane.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['register-table']);

    const events = await published(p);
    expect(events.map((e) => [e.op, e.key, e.schemaVersion, e.capture])).toEqual([
      ['insert', { id: 1 }, 1, 'dms'],
      ['update', { id: 1 }, 1, 'dms'],
      ['insert', { id: 2 }, 1, 'dms'],
      ['delete', { id: 1 }, 1, 'dms'],
    ]);
    expect(metricSum('EventsPublished', { Source: 'shop' })).toBe(4);
    expect(metricSum('SchemaChanges', { Source: 'shop' })).toBe(1);
    expect(emf().some((r) => r._aws.CloudWatchMetrics[0]!.Metrics.some((m) => m.Name === 'CaptureLag' && m.Unit === 'Milliseconds'))).toBe(true);
    // Exactly the dimensions of contracts/metrics.ts (the constructs' alarms name those), no Powertools `service`.
    for (const r of emf()) expect(r._aws.CloudWatchMetrics[0]!.Dimensions).toEqual([['Source']]);
  });

  it('a new column is a compatible version 2; a record that leaves columns out is not a drop', async () => {
    const p = await pipeline();
    await p.handler(await rawEvent(p, [dms('insert', 'public.orders', { id: 1, status: 'new' }, 1)]));
    await p.handler(await rawEvent(p, [dms('insert', 'public.orders', { id: 2, status: 'new', note: 'hi' }, 2), dms('insert', 'public.orders', { id: 3 }, 3)]));
    expect((await p.controlPlane.getTable('shop', 'public.orders'))?.state).toBe('active');
    const versions = await p.controlPlane.listSchemaVersions('shop', 'public.orders');
    expect(versions.map((v) => [v.version, v.columns.map((c) => c.name), v.effectivePosition])).toEqual([
      [1, ['id', 'status'], dmsPos(1)],
      [2, ['id', 'status', 'note'], dmsPos(2)],
    ]);
    expect((await published(p)).map((e) => [e.key.id, e.schemaVersion])).toEqual([
      [1, 1],
      [2, 2],
      [3, 2],
    ]);
    const add = (await p.controlPlane.listAudit('shop', 'public.orders')).find((a) => a.action === 'add-schema-version');
    expect(add?.detail).toMatchObject({ version: 2, classification: 'compatible', reason: 'new nullable column note' });
  });

  it('control records: a definition registers types; a drop without a definition pauses the table', async () => {
    const p = await pipeline();
    await p.handler(
      await rawEvent(p, [
        dmsControl('create-table', 'public.orders', {
          columns: { id: { type: 'INT32', nullable: false }, status: { type: 'STRING', nullable: true } },
          'primary-key': ['id'],
        }),
        dms('insert', 'public.orders', { id: 1, status: 'new' }, 1),
        dmsControl('drop-column', 'public.orders'),
        dms('insert', 'public.orders', { id: 2 }, 2),
      ]),
    );
    const v1 = await p.controlPlane.getSchemaVersion('shop', 'public.orders', 1);
    expect(v1?.columns).toEqual([
      { name: 'id', type: 'INT32', nullable: false },
      { name: 'status', type: 'STRING', nullable: true },
    ]);
    const t = await p.controlPlane.getTable('shop', 'public.orders');
    expect(t?.state).toBe('paused');
    expect(t?.stateReason).toMatch(/^SCHEMA_BREAKING: the source reported 'drop-column' without the table definition/);
    // Events keep flowing into the log, so that sinks can hold them.
    expect((await published(p)).map((e) => e.key.id)).toEqual([1, 2]);
    expect(metricSum('TablesPaused', { Source: 'shop' })).toBe(1);
  });
});

describe('normalizer handler: slot-capture records', () => {
  it('registers types on first sight, evolves on a new nullable column, and pauses on a dropped column while still publishing', async () => {
    const p = await pipeline();
    const cols = (id: number, extra: Col[] = []): Col[] => [['id', 'integer', id], ['name', 'text', `n${id}`], ...extra];
    await p.handler(await rawEvent(p, [slot({ lsn: 1, columns: cols(1) }), slot({ lsn: 2, columns: cols(2) })]));
    expect(await p.controlPlane.getSchemaVersion('shop', 'public.items', 1)).toMatchObject({
      columns: [
        { name: 'id', type: 'integer', nullable: true },
        { name: 'name', type: 'text', nullable: true },
      ],
      key: ['id'],
      effectivePosition: slotPos(1),
    });
    expect((await p.controlPlane.getTable('shop', 'public.items'))?.deleteMode).toBe('soft');

    // A new nullable column: version 2, still active.
    await p.handler(await rawEvent(p, [slot({ lsn: 3, columns: cols(3, [['qty', 'smallint', 5]]) })]));
    expect(await p.controlPlane.getTable('shop', 'public.items')).toMatchObject({ state: 'active', currentVersion: 2 });

    // `name` is gone from a complete row image: a drop. The table pauses; its events are still published.
    const event = await rawEvent(p, [
      slot({
        lsn: 4,
        columns: [
          ['id', 'integer', 4],
          ['qty', 'smallint', 1],
        ],
      }),
      slot({
        lsn: 5,
        op: 'update',
        columns: [
          ['id', 'integer', 4],
          ['qty', 'smallint', 2],
        ],
      }),
    ]);
    expect(await p.handler(event)).toEqual({ batchItemFailures: [] });
    const t = await p.controlPlane.getTable('shop', 'public.items');
    expect(t).toMatchObject({ state: 'paused', currentVersion: 3 });
    expect(t?.stateReason).toBe('SCHEMA_BREAKING: column name was dropped (schema version 3)');
    const audit = await p.controlPlane.listAudit('shop', 'public.items');
    expect(audit.map((a) => a.action)).toEqual(['register-table', 'add-schema-version', 'pause-table', 'add-schema-version']);
    expect(audit[2]).toMatchObject({
      actor: 'normalizer',
      outcome: 'done',
      detail: { from: 'active', to: 'paused', version: 3, reason: 'column name was dropped' },
    });
    expect(audit[2]!.detail.hint).toMatch(/re-snapshot/);
    const events = await published(p);
    expect(events.map((e) => [e.op, e.key.id, e.schemaVersion])).toEqual([
      ['insert', 1, 1],
      ['insert', 2, 1],
      ['insert', 3, 2],
      ['insert', 4, 3],
      ['update', 4, 3],
    ]);
    // The loud log line, with reason and hint.
    const paused = logLines().find((l) => l.message === 'Table paused: breaking schema change');
    expect(paused).toMatchObject({ level: 'ERROR', table: 'public.items', reason: 'column name was dropped' });
    expect(String(paused?.hint)).toMatch(/resume/);
    expect(metricSum('TablesPaused', { Source: 'shop' })).toBe(1);
  });

  it('an unchanged TOAST value is not a drop, and a replayed older record is read with its own version', async () => {
    const p = await pipeline();
    await p.handler(
      await rawEvent(p, [
        slot({
          lsn: 1,
          columns: [
            ['id', 'integer', 1],
            ['doc', 'text', 'big'],
          ],
        }),
        slot({
          lsn: 2,
          columns: [
            ['id', 'integer', 2],
            ['doc', 'text', 'x'],
            ['tag', 'text', 't'],
          ],
        }),
        slot({
          lsn: 3,
          op: 'update',
          columns: [
            ['id', 'integer', 1],
            ['tag', 'text', 'u'],
          ],
          unchanged: ['doc'],
        }),
      ]),
    );
    expect(await p.controlPlane.getTable('shop', 'public.items')).toMatchObject({ state: 'active', currentVersion: 2 });
    // The first record again (a replay): it lacks `tag`, but at its position version 1 was in effect.
    await p.handler(
      await rawEvent(p, [
        slot({
          lsn: 1,
          columns: [
            ['id', 'integer', 1],
            ['doc', 'text', 'big'],
          ],
        }),
      ]),
    );
    expect(await p.controlPlane.getTable('shop', 'public.items')).toMatchObject({ state: 'active', currentVersion: 2 });
    const events = await published(p);
    expect(events.map((e) => [e.position, e.schemaVersion, e.missing])).toEqual([
      [slotPos(1), 1, []],
      [slotPos(1), 1, []],
      [slotPos(2), 2, []],
      [slotPos(3), 2, ['doc']],
    ]);
  });

  it('a table first seen through a delete or a TOAST update is registered with the types the record shows, not as unknown', async () => {
    // Unknown types become text columns in the sinks, and the real type arriving later holds the
    // table in every sink (a column type cannot change in place): the first record must say what it knows.
    const p = await pipeline();
    await p.handler(
      await rawEvent(p, [
        slot({ lsn: 1, table: 'public.gone', op: 'delete', columns: null, oldKey: [['id', 'bigint', 7]] }),
        slot({
          lsn: 2,
          table: 'public.docs',
          op: 'update',
          columns: [
            ['id', 'bigint', 1],
            ['tag', 'text', 'u'],
          ],
          unchanged: ['body'],
        }),
      ]),
    );
    expect((await p.controlPlane.getSchemaVersion('shop', 'public.gone', 1))?.columns).toMatchObject([{ name: 'id', type: 'bigint' }]);
    const docs = (await p.controlPlane.getSchemaVersion('shop', 'public.docs', 1))?.columns;
    expect(docs?.find((c) => c.name === 'id')?.type).toBe('bigint');
    expect(docs?.find((c) => c.name === 'tag')?.type).toBe('text');
    expect(docs?.find((c) => c.name === 'body')?.type).toBeNull();
    // The slot capture says the unchanged column's type too (`unchangedTypes`): then it is known
    // from the first record (the search index could not hold a text body in a field created as keyword).
    await p.handler(
      await rawEvent(p, [
        slot({
          lsn: 4,
          table: 'public.notes',
          op: 'update',
          columns: [
            ['id', 'bigint', 1],
            ['tag', 'text', 'u'],
          ],
          unchanged: ['body'],
          unchangedTypes: { body: 'text' },
        }),
      ]),
    );
    expect((await p.controlPlane.getSchemaVersion('shop', 'public.notes', 1))?.columns.find((c) => c.name === 'body')?.type).toBe('text');
    // The full image that follows is then no change of the key's type at all.
    await p.handler(
      await rawEvent(p, [
        slot({
          lsn: 3,
          table: 'public.gone',
          columns: [
            ['id', 'bigint', 8],
            ['v', 'text', 'x'],
          ],
        }),
      ]),
    );
    const v2 = await p.controlPlane.getSchemaVersion('shop', 'public.gone', 2);
    expect(v2?.columns.find((c) => c.name === 'id')?.type).toBe('bigint');
  });

  it('with catalog types (CDC_CATALOG_TYPES=published), a table first seen through a DMS data record waits for them: retried, then registered typed', async () => {
    // docs/schema-drift.md, "First sight of a table": never registered untyped on the DMS path.
    const p = await pipeline();
    const handler = p.build({ catalogTypes: true });
    // A slot record first (typed): its buffered events are retried with the record that failed, in order.
    const event = await rawEvent(p, [
      slot({ lsn: 1, columns: [['id', 'integer', 7]] }),
      dms('insert', 'public.orders', { id: 1, total: '12.30' }, 2),
      dms('insert', 'public.orders', { id: 2, total: '1.00' }, 3),
    ]);
    const seqs = event.Records.map((r) => r.kinesis.sequenceNumber);
    expect(await handler(event)).toEqual({ batchItemFailures: seqs.map((s) => ({ itemIdentifier: s })) });
    expect(await published(p)).toEqual([]);
    expect((await p.controlPlane.listTables('shop')).map((t) => t.table)).not.toContain('public.orders');
    expect(await p.controlPlane.listDeadLetters()).toEqual([]);
    // The snapshot worker's publication (lambda/core/shared/catalog-types.ts), in the control table.
    expect(
      await publishCatalogTypes(p.controlPlane, 'shop', ['public.orders'], async (t) => ({
        table: t,
        columns: [
          { name: 'id', type: 'bigint' },
          { name: 'total', type: 'numeric(12,2)' },
        ],
        key: ['id'],
      })),
    ).toEqual(['public.orders']);
    expect(await handler(event)).toEqual({ batchItemFailures: [] });
    expect((await published(p)).map((e) => [e.table, e.key.id, e.schemaVersion])).toEqual([
      ['public.items', 7, 1],
      ['public.orders', 1, 1],
      ['public.orders', 2, 1],
    ]);
    expect((await p.controlPlane.getSchemaVersion('shop', 'public.orders', 1))?.columns.map((c) => [c.name, c.type])).toEqual([
      ['id', 'bigint'],
      ['total', 'numeric(12,2)'],
    ]);
    expect(catalogTypesSetting('published')).toBe(true);
    expect(catalogTypesSetting(undefined)).toBe(false);
    expect(() => catalogTypesSetting('yes')).toThrow(/CDC_CATALOG_TYPES: expected 'published' or nothing, got "yes"/);
  });

  it('heartbeat rows are ordinary events; keys of several columns make the partition key', async () => {
    const p = await pipeline();
    await p.handler(
      await rawEvent(p, [
        slot({
          lsn: 1,
          table: 'public.cdc_heartbeat',
          key: ['source_id'],
          columns: [
            ['source_id', 'text', 'shop'],
            ['beat_at', 'timestamp with time zone', '2026-11-29 10:00:00+00'],
          ],
        }),
        slot({
          lsn: 2,
          table: 'public.lines',
          key: ['order_id', 'line'],
          columns: [
            ['order_id', 'integer', 7],
            ['line', 'integer', 1],
            ['sku', 'text', 'a'],
          ],
        }),
      ]),
    );
    const events = await published(p);
    expect(events.map((e) => [e.table, e.key])).toEqual([
      ['public.cdc_heartbeat', { source_id: 'shop' }],
      ['public.lines', { order_id: 7, line: 1 }],
    ]);
    const byTable = await readJson<ChangeEvent>(kinesis, p.log);
    const keys = [...byTable.values()]
      .flat()
      .map((r) => r.partitionKey)
      .sort();
    expect(keys).toEqual(['shop/public.cdc_heartbeat/[["source_id","shop"]]', 'shop/public.lines/[["line","1"],["order_id","7"]]']); // values by their text (keyText)
    expect((await p.controlPlane.listTables('shop')).map((t) => t.table)).toEqual(['public.cdc_heartbeat', 'public.lines']);
  });
});

describe('normalizer handler: bad input and failures', () => {
  it('dead-letters a malformed record with its reason and publishes the rest of the batch', async () => {
    const p = await pipeline();
    const event = await rawEvent(p, [
      slot({ lsn: 1, columns: [['id', 'integer', 1]] }),
      'this is not json {',
      { ...dms('insert', 'public.orders', { id: 5 }, 2), metadata: { ...dms('insert', 'public.orders', { id: 5 }, 2).metadata, operation: 'upsert' } },
      slot({ lsn: 3, columns: [['id', 'integer', 3]] }),
      dms('insert', 'public.nokey', { v: 1 }, 4),
      slot({ lsn: 5, columns: [['id', 'integer', 5]], source: 'other' }),
      slot({ lsn: 6, columns: [['id', 'integer', 6]] }),
    ]);
    expect(await p.handler(event)).toEqual({ batchItemFailures: [] });
    expect((await published(p)).map((e) => e.key.id)).toEqual([1, 3, 6]);
    const letters = await p.controlPlane.listDeadLetters('normalizer');
    const seqs = event.Records.map((r) => r.kinesis.sequenceNumber);
    expect(letters.map((l) => [l.code, l.origin, l.table])).toEqual([
      ['INVALID_RECORD', `${p.raw}/shardId-000000000000/${seqs[1]}`, null],
      ['UNKNOWN_OPERATION', `${p.raw}/shardId-000000000000/${seqs[2]}`, 'public.orders'],
      ['KEY_UNKNOWN', `${p.raw}/shardId-000000000000/${seqs[4]}`, 'public.nokey'],
      ['SOURCE_MISMATCH', `${p.raw}/shardId-000000000000/${seqs[5]}`, 'public.items'],
    ]);
    expect(letters[0]!.reason).toMatch(/^record: not valid JSON/);
    expect(letters[0]!.record).toBe('this is not json {');
    expect(letters[1]!.reason).toMatch(/unknown operation 'upsert'/);
    expect(letters[2]!.reason).toMatch(/primary key of public.nokey is unknown/);
    expect(JSON.parse(letters[3]!.record)).toMatchObject({ source: 'other' });
    expect(metricSum('DeadLetters', { Stage: 'normalizer', Source: 'shop' })).toBe(4);
    const deadLetterRecords = emf().filter((r) => r._aws.CloudWatchMetrics[0]!.Metrics.some((m) => m.Name === 'DeadLetters'));
    for (const r of deadLetterRecords) expect(r._aws.CloudWatchMetrics[0]!.Dimensions.map((d) => [...d].sort())).toEqual([['Source', 'Stage']]);
    // The active table a dead letter names is marked degraded (items was registered by the first record).
    expect((await p.controlPlane.getTable('shop', 'public.items'))?.state).toBe('degraded');
  });

  it('when the change log is unavailable, every record of the batch is failed so none is lost or overtaken', async () => {
    const p = await pipeline();
    const broken = p.build({ log: `missing-${randomUUID()}` });
    const event = await rawEvent(p, [slot({ lsn: 1, columns: [['id', 'integer', 1]] }), slot({ lsn: 2, columns: [['id', 'integer', 2]] }), 'not json']);
    const response = await broken(event);
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(event.Records.map((r) => r.kinesis.sequenceNumber));
    expect(logLines().some((l) => l.message === 'Record failed; it and every later record of the batch will be retried' && l.level === 'ERROR')).toBe(true);
  });

  it('a control-plane failure mid-batch fails that record, every later one and the unpublished earlier ones; the retry completes in order', async () => {
    const p = await pipeline();
    let down = true;
    // Fault injection around the real control plane: reads of public.bad fail while "down".
    const flaky = new Proxy(p.controlPlane, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop === 'getTable' || prop === 'listSchemaVersions') {
          return async (sourceId: string, table: string) => {
            if (down && table === 'public.bad') throw Object.assign(new Error('injected: DynamoDB unavailable'), { name: 'ServiceUnavailable' });
            return (v as (s: string, t: string) => Promise<unknown>).call(target, sourceId, table);
          };
        }
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const handler = p.build({ controlPlane: flaky, flushEvents: 2 });
    const payloads = [
      slot({ lsn: 1, columns: [['id', 'integer', 1]] }),
      slot({ lsn: 2, columns: [['id', 'integer', 2]] }), // buffer reaches 2 → published
      slot({
        lsn: 3,
        columns: [
          ['id', 'integer', 1],
          ['v', 'text', 'a'],
        ],
      }), // buffered, not yet published
      slot({ lsn: 4, table: 'public.bad', columns: [['id', 'integer', 9]] }), // control plane fails here
      slot({
        lsn: 5,
        columns: [
          ['id', 'integer', 1],
          ['v', 'text', 'b'],
        ],
      }),
    ];
    const event = await rawEvent(p, payloads);
    const seqs = event.Records.map((r) => r.kinesis.sequenceNumber);
    const response = await handler(event);
    expect(response.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(seqs.slice(2));
    expect((await published(p)).map((e) => e.position)).toEqual([slotPos(1), slotPos(2)]);

    // Lambda retries from the lowest failed sequence number.
    down = false;
    const retry: KinesisStreamEvent = { Records: event.Records.slice(2) };
    expect(await handler(retry)).toEqual({ batchItemFailures: [] });
    const events = await published(p);
    expect(events.map((e) => [e.table, e.key.id, e.position])).toEqual([
      ['public.items', 1, slotPos(1)],
      ['public.items', 2, slotPos(2)],
      ['public.items', 1, slotPos(3)],
      ['public.bad', 9, slotPos(4)],
      ['public.items', 1, slotPos(5)],
    ]);
  });

  it('normalizers racing on a new table register it once and stamp the same version', async () => {
    const p = await pipeline();
    const other = p.build();
    const a = await rawEvent(p, [
      slot({
        lsn: 1,
        table: 'public.race',
        columns: [
          ['id', 'integer', 1],
          ['v', 'text', 'x'],
        ],
      }),
    ]);
    const b = await rawEvent(p, [
      slot({
        lsn: 2,
        table: 'public.race',
        columns: [
          ['id', 'integer', 2],
          ['v', 'text', 'y'],
        ],
      }),
    ]);
    const c = await rawEvent(p, [
      slot({
        lsn: 3,
        table: 'public.race',
        columns: [
          ['id', 'integer', 3],
          ['v', 'text', 'z'],
        ],
      }),
    ]);
    // Two batches through the same handler at once (the local poller runs one per shard), and one through another normalizer.
    const results = await Promise.all([p.handler(a), p.handler(b), other(c)]);
    expect(results).toEqual([{ batchItemFailures: [] }, { batchItemFailures: [] }, { batchItemFailures: [] }]);
    expect(await p.controlPlane.listSchemaVersions('shop', 'public.race')).toHaveLength(1);
    expect((await p.controlPlane.listAudit('shop', 'public.race')).map((x) => x.action)).toEqual(['register-table']);
    expect((await published(p)).map((e) => [e.key.id, e.schemaVersion])).toEqual([
      [1, 1],
      [2, 1],
      [3, 1],
    ]);
  });
});
