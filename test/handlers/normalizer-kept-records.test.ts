/**
 * The normalizer's table records kept across batches for at most a second (docs/architecture.md,
 * "Table records kept for at most a second"), on the real parts: the DynamoDB control plane on
 * DynamoDB Local, kinesalite for the raw stream and the change log, and the operator function (the
 * path `cdc resnapshot` takes on AWS).
 *
 * - Two normalizers (two shards): one registers a new version while the other keeps the table's
 *   record of the version before; the other's next batch, within the bound, sees the new column,
 *   loses the registration, reads the record again at once and stamps the new version: one version
 *   registered, no batch failed.
 * - An operator's re-snapshot request takes effect at the normalizer within the bound: a breaking
 *   change seen after it leaves the table `needs-resnapshot` (it does not become `paused`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { KinesisStreamEvent } from 'aws-lambda';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { KinesisChangeLog } from '../../lambda/adapters/change-log-kinesis.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { createNormalizerHandler, type NormalizerHandler } from '../../lambda/handlers/normalizer.ts';
import { createOperatorHandler } from '../../lambda/handlers/operator.ts';
import { TABLE_RECORD_MAX_AGE_MS } from '../../lambda/core/shared/kept-table-records.ts';
import { validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { EnvName } from '../../contracts/env.ts';
import { createStream, readJson, readShards } from '../helpers/kinesis-read.ts';
import { operatorCall } from '../helpers/operator-call.ts';

let ddb: DynamoDbLocal;
let kin: Kinesalite;
let dynamo: DynamoDBClient;
let kinesis: KinesisClient;

beforeAll(async () => {
  [ddb, kin] = await Promise.all([startDynamoDbLocal(), startKinesalite()]);
  dynamo = dynamoDbClient(ddb.endpoint);
  kinesis = kinesisClient(kin.endpoint);
}, 120_000);
afterAll(async () => {
  dynamo?.destroy();
  kinesis?.destroy();
  await Promise.all([ddb?.stop(), kin?.stop()]);
});

type Col = [name: string, type: string, value: unknown];
function slot(lsn: number, columns: Col[]) {
  return {
    format: 'cdc-slot/1',
    source: 'shop',
    xid: String(500 + lsn),
    commitLsn: `0/${(0x1000 + lsn * 0x100).toString(16).toUpperCase()}`,
    commitTs: new Date(Date.UTC(2026, 10, 29, 10, 0, lsn)).toISOString(),
    index: 0,
    table: 'public.items',
    op: 'insert',
    key: ['id'],
    columns: columns.map(([name, type, value]) => ({ name, type, value })),
    oldKey: null,
    unchanged: [],
  };
}

interface Setup {
  cp: DynamoDbControlPlane;
  build(): NormalizerHandler;
  event(payloads: unknown[]): Promise<KinesisStreamEvent>;
  published(): Promise<ChangeEvent[]>;
}

async function setup(): Promise<Setup> {
  const id = randomUUID().slice(0, 8);
  await createControlTable(dynamo, `ctl-${id}`);
  const cp = new DynamoDbControlPlane(dynamo, `ctl-${id}`);
  const [rawArn] = await Promise.all([createStream(kinesis, `raw-${id}`, 1), createStream(kinesis, `log-${id}`, 1)]);
  const build = (): NormalizerHandler =>
    createNormalizerHandler({
      source: 'shop',
      tables: [{ table: 'public.items', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }],
      controlPlane: cp,
      changeLog: new KinesisChangeLog(kinesis, `log-${id}`, { maxAttempts: 2, baseDelayMs: 1 }),
      logger: new Logger({ serviceName: 'test', logLevel: 'SILENT' }),
      metrics: new Metrics({ namespace: 'test' }),
    });
  const event = async (payloads: unknown[]): Promise<KinesisStreamEvent> => {
    const before = (await readShards(kinesis, `raw-${id}`)).get('shardId-000000000000')?.length ?? 0;
    await kinesis.send(
      new PutRecordsCommand({ StreamName: `raw-${id}`, Records: payloads.map((x, i) => ({ PartitionKey: `p${i}`, Data: Buffer.from(JSON.stringify(x)) })) }),
    );
    const records = (await readShards(kinesis, `raw-${id}`)).get('shardId-000000000000')!.slice(before);
    return toKinesisStreamEvent(records, { streamArn: rawArn, shardId: 'shardId-000000000000' });
  };
  const published = async (): Promise<ChangeEvent[]> => {
    const out: ChangeEvent[] = [];
    for (const records of (await readJson<unknown>(kinesis, `log-${id}`)).values()) for (const r of records) out.push(validateChangeEvent(r.value));
    return out.sort((a, b) => (a.position < b.position ? -1 : 1));
  };
  return { cp, build, event, published };
}

const ID = (n: number): Col => ['id', 'integer', n];

describe('the normalizer keeps table records for at most a second (DynamoDB Local, kinesalite)', () => {
  it('a normalizer whose kept record is a version behind registers nothing twice: it loses, reads again at once and stamps the new version', async () => {
    const s = await setup();
    const a = s.build();
    const b = s.build();
    expect(await a(await s.event([slot(1, [ID(1), ['v', 'text', 'x']])]))).toEqual({ batchItemFailures: [] });
    const [e2, e3, e4] = [
      await s.event([slot(2, [ID(2), ['v', 'text', 'y']])]),
      await s.event([slot(3, [ID(3), ['v', 'text', 'z'], ['w', 'integer', 7]])]),
      await s.event([slot(4, [ID(4), ['v', 'text', 'q'], ['w', 'integer', 8]])]),
    ];
    const started = performance.now();
    // b reads (and keeps) the record of version 1; a registers version 2 (a new column); b sees the same column in its next batch, within the bound.
    expect(await b(e2)).toEqual({ batchItemFailures: [] });
    expect(await a(e3)).toEqual({ batchItemFailures: [] });
    expect(await b(e4)).toEqual({ batchItemFailures: [] });
    expect(performance.now() - started, 'the three batches ran within the bound').toBeLessThan(TABLE_RECORD_MAX_AGE_MS);
    expect((await s.cp.listSchemaVersions('shop', 'public.items')).map((v) => v.version)).toEqual([1, 2]);
    expect((await s.cp.listAudit('shop', 'public.items')).map((x) => x.action)).toEqual(['register-table', 'add-schema-version']);
    expect((await s.published()).map((e) => [e.key.id, e.schemaVersion])).toEqual([
      [1, 1],
      [2, 1],
      [3, 2],
      [4, 2],
    ]);
  });

  it("an operator's re-snapshot request takes effect within the bound: a breaking change after it leaves the table needs-resnapshot", async () => {
    const s = await setup();
    const n = s.build();
    expect(await n(await s.event([slot(1, [ID(1), ['v', 'text', 'x']])]))).toEqual({ batchItemFailures: [] });
    // The normalizer keeps the record (active); the operator asks for a re-snapshot meanwhile.
    expect(await n(await s.event([slot(2, [ID(2), ['v', 'text', 'y']])]))).toEqual({ batchItemFailures: [] });
    const operator = createOperatorHandler({
      controlPlane: s.cp,
      env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(24 * 3_600_000) },
      logger: { info: () => undefined, warn: () => undefined },
    });
    const res = await operator(
      operatorCall('arn:aws:sts::111111111111:assumed-role/cdc-oncall/bob', { action: 'resnapshot', table: 'public.items', reason: 'gap' }),
    );
    expect(res).toMatchObject({ ok: true, result: { outcome: 'done', action: 'resnapshot' } });
    await new Promise((r) => setTimeout(r, TABLE_RECORD_MAX_AGE_MS));
    // A dropped column: breaking. The table needs a re-snapshot already: it stays so, the change is audited.
    expect(await n(await s.event([slot(3, [ID(3)])]))).toEqual({ batchItemFailures: [] });
    expect((await s.cp.getTable('shop', 'public.items'))?.state).toBe('needs-resnapshot');
    const actions = (await s.cp.listAudit('shop', 'public.items')).map((x) => x.action);
    expect(actions).toContain('breaking-schema-change');
    expect(actions).not.toContain('pause-table');
  });
});
