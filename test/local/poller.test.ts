/**
 * The local event-source poller against kinesalite, with checkpoints and dead letters in the
 * DynamoDB control plane (DynamoDB Local): Lambda's Kinesis event source mapping semantics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import type { KinesisStreamEvent } from 'aws-lambda';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { isBadInputError, Poller, type StreamHandler } from '../../local/poller.ts';
import { InvalidRecordError } from '../../lambda/core/shared/errors.ts';
import { until } from './helpers.ts';

let ddb: DynamoDbLocal;
let kin: Kinesalite;
let kinesis: KinesisClient;
let controlPlane: DynamoDbControlPlane;
let streamNo = 0;

beforeAll(async () => {
  [ddb, kin] = await Promise.all([startDynamoDbLocal({ jvmOptions: QUICK_START_JVM_OPTIONS }), startKinesalite()]);
  kinesis = kinesisClient(kin.endpoint);
  const dynamo = dynamoDbClient(ddb.endpoint);
  await createControlTable(dynamo, 'control');
  controlPlane = new DynamoDbControlPlane(dynamo, 'control');
});

afterAll(async () => {
  kinesis?.destroy();
  await Promise.all([ddb?.stop(), kin?.stop()]);
});

async function stream(shards = 1): Promise<string> {
  const name = `s${++streamNo}`;
  await createStream(kinesis, name, shards);
  return name;
}

/** Puts records `<prefix>0 … <prefix>n-1`, partition key = the value, so with one shard they keep this order. */
async function put(name: string, values: string[]): Promise<void> {
  for (let i = 0; i < values.length; i += 500) {
    const out = await kinesis.send(
      new PutRecordsCommand({ StreamName: name, Records: values.slice(i, i + 500).map((v) => ({ PartitionKey: 'k', Data: Buffer.from(v) })) }),
    );
    expect(out.FailedRecordCount ?? 0).toBe(0);
  }
}

function values(event: KinesisStreamEvent): string[] {
  return event.Records.map((r) => Buffer.from(r.kinesis.data, 'base64').toString('utf8'));
}

function poller(name: string, consumer: string, handler: StreamHandler, extra: Partial<ConstructorParameters<typeof Poller>[0]> = {}): Poller {
  return new Poller({ consumer, kinesis, streamName: name, controlPlane, handler, idleMs: 20, retryBackoffMs: 1, ...extra });
}

describe('local event-source poller', () => {
  it('delivers a shard in order in batches of at most batchSize, checkpoints, and resumes after the checkpoint', async () => {
    const name = await stream();
    const input = Array.from({ length: 57 }, (_, i) => `r${i}`);
    await put(name, input);
    const seen: string[] = [];
    const sizes: number[] = [];
    const p = poller(
      name,
      'c1',
      async (event) => {
        sizes.push(event.Records.length);
        seen.push(...values(event));
        return { batchItemFailures: [] };
      },
      { batchSize: 10 },
    );
    await p.start();
    await until('all records', () => seen.length >= 57);
    await p.stop();
    expect(seen).toEqual(input);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(10);
    expect(p.stats.recordsDone).toBe(57);

    // A new poller for the same consumer starts after the checkpoint: only new records arrive.
    await put(name, ['late1', 'late2']);
    const again: string[] = [];
    const q = poller(name, 'c1', async (event) => {
      again.push(...values(event));
    });
    await q.start();
    await until('new records', () => again.length >= 2);
    await q.stop();
    expect(again).toEqual(['late1', 'late2']);

    // Another consumer of the same stream has its own checkpoint and reads everything.
    const other: string[] = [];
    const r = poller(
      name,
      'c1-other',
      async (event) => {
        other.push(...values(event));
      },
      { batchSize: 100 },
    );
    await r.start();
    await until('other consumer', () => other.length >= 59);
    await r.stop();
    expect(other).toEqual([...input, 'late1', 'late2']);
  });

  it('on a partial batch failure checkpoints before the failed record and retries from it', async () => {
    const name = await stream();
    await put(name, ['a', 'b', 'c', 'd', 'e']);
    const batches: string[][] = [];
    let failedOnce = false;
    const p = poller(name, 'c2', async (event) => {
      const vs = values(event);
      batches.push(vs);
      const c = event.Records.find((r) => Buffer.from(r.kinesis.data, 'base64').toString() === 'c');
      if (c && !failedOnce) {
        failedOnce = true;
        return { batchItemFailures: [{ itemIdentifier: c.kinesis.sequenceNumber }] };
      }
      return { batchItemFailures: [] };
    });
    await p.start();
    await until('retry', () => batches.flat().filter((v) => v === 'e').length >= 1 && batches.length >= 2);
    await p.stop();
    expect(batches[0]).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(batches[1]).toEqual(['c', 'd', 'e']);
    expect(p.stats.deadLetters).toBe(0);
  });

  it('bisects a failing batch, dead-letters only the record that fails as bad input, and moves on', async () => {
    const name = await stream();
    const input = Array.from({ length: 16 }, (_, i) => (i === 11 ? JSON.stringify({ source: 'demo', table: 'public.poison', v: 11 }) : `ok${i}`));
    await put(name, input);
    const delivered = new Set<string>();
    const p = poller(
      name,
      'c3',
      async (event) => {
        const vs = values(event);
        if (vs.some((v) => v.includes('poison'))) throw new InvalidRecordError('after.v', 'cannot apply the poison record');
        for (const v of vs) delivered.add(v);
      },
      { batchSize: 16, maxRetries: 2 },
    );
    await p.start();
    await until('dead letter', () => p.stats.deadLetters >= 1 && delivered.size >= 15);
    await p.stop();
    expect([...delivered].sort()).toEqual(input.filter((_, i) => i !== 11).sort());
    const letters = await controlPlane.listDeadLetters('c3');
    expect(letters).toHaveLength(1);
    expect(letters[0]!.code).toBe('INVALID_RECORD');
    expect(letters[0]!.reason).toContain('cannot apply the poison record');
    expect(letters[0]!.record).toBe(input[11]);
    expect(letters[0]!.source).toBe('demo');
    expect(letters[0]!.table).toBe('public.poison');
    expect(letters[0]!.origin).toMatch(new RegExp(`^${name}/shardId-000000000000/\\d+$`));

    // The checkpoint moved past the dead letter: a restart does not see the batch again.
    await put(name, ['after']);
    const later: string[] = [];
    const q = poller(name, 'c3', async (event) => {
      later.push(...values(event));
    });
    await q.start();
    await until('record after', () => later.length >= 1);
    await q.stop();
    expect(later).toEqual(['after']);
  });

  it('retries an infrastructure error without limit (far past maxRetries), reports the stall, and dead-letters nothing', async () => {
    const name = await stream();
    await put(name, ['x1', 'x2', 'x3']);
    let calls = 0;
    let down = true;
    const got: string[] = [];
    const p = poller(
      name,
      'c4',
      async (event) => {
        calls++;
        if (down) throw new Error('connect ECONNREFUSED 127.0.0.1:5432 (sink down)');
        got.push(...values(event));
      },
      { bisectOnError: false, maxRetries: 3, retryBackoffMs: 2, maxBackoffMs: 10 },
    );
    await p.start();
    await until('many retries', () => calls >= 40);
    expect(p.stats.deadLetters).toBe(0);
    expect(p.stats.stalledSince).not.toBeNull();
    expect(p.stats.lastError).toContain('sink down');
    down = false;
    await until('delivery after the outage', () => got.length >= 3);
    await until('stall cleared', () => p.stats.stalledSince === null);
    await p.stop();
    expect(got).toEqual(['x1', 'x2', 'x3']);
    expect(p.stats.lastError).toBeNull();
    expect(await controlPlane.listDeadLetters('c4')).toEqual([]);
  });

  it('a checkpoint that cannot be recorded (control plane down) shows as a stall until it is, and nothing is delivered twice meanwhile', async () => {
    const name = await stream();
    await put(name, ['y1', 'y2']);
    let down = true;
    let attempts = 0;
    const flaky = new Proxy(controlPlane, {
      get(target, prop, receiver) {
        if (prop !== 'putCheckpoint') return Reflect.get(target, prop, receiver) as unknown;
        return async (...args: Parameters<DynamoDbControlPlane['putCheckpoint']>) => {
          if (down) {
            attempts++;
            throw new Error('connect ECONNREFUSED 127.0.0.1:8000 (control plane down)');
          }
          return target.putCheckpoint(...args);
        };
      },
    });
    const got: string[] = [];
    const p = poller(
      name,
      'c4c',
      async (event) => {
        got.push(...values(event));
      },
      { controlPlane: flaky, retryBackoffMs: 1 },
    );
    await p.start();
    await until('checkpoint retries', () => attempts >= 5);
    // The handler succeeded; the shard cannot move on until its checkpoint is recorded: a stall.
    expect(got).toEqual(['y1', 'y2']);
    expect(p.stats.stalledSince).not.toBeNull();
    expect(p.stats.lastError).toContain('control plane down');
    expect(p.stats.recordsDone).toBe(0);
    down = false;
    await until('checkpoint recorded', () => p.stats.recordsDone === 2);
    expect(p.stats.stalledSince).toBeNull();
    expect(p.stats.lastError).toBeNull();
    await p.stop();
    expect(got).toEqual(['y1', 'y2']);
  });

  it('a reported batch item failure (the handlers report only infrastructure errors so) is retried without limit too', async () => {
    const name = await stream();
    await put(name, ['y1', 'y2']);
    let calls = 0;
    const got: string[] = [];
    const p = poller(
      name,
      'c4b',
      async (event) => {
        calls++;
        if (calls <= 30) return { batchItemFailures: [{ itemIdentifier: event.Records[0]!.kinesis.sequenceNumber }] };
        got.push(...values(event));
        return { batchItemFailures: [] };
      },
      { maxRetries: 1, retryBackoffMs: 1, maxBackoffMs: 5 },
    );
    await p.start();
    await until('delivery', () => got.length >= 2);
    await p.stop();
    expect(got).toEqual(['y1', 'y2']);
    expect(p.stats.deadLetters).toBe(0);
  });

  it('isBadInputError: named invalid-record errors and full-batch failures made only of them', () => {
    expect(isBadInputError(new InvalidRecordError('x', 'y'))).toBe(true);
    expect(isBadInputError(new Error('ECONNREFUSED'))).toBe(false);
    const full = Object.assign(new Error('All records failed processing'), { name: 'FullBatchFailureError', recordErrors: [new InvalidRecordError('a', 'b')] });
    expect(isBadInputError(full)).toBe(true);
    const mixed = Object.assign(new Error('All records failed processing'), {
      name: 'FullBatchFailureError',
      recordErrors: [new InvalidRecordError('a', 'b'), new Error('timeout')],
    });
    expect(isBadInputError(mixed)).toBe(false);
  });

  it('a batch that is still failing when the poller stops is not acknowledged: the next run gets it again', async () => {
    const name = await stream();
    await put(name, ['p1', 'p2']);
    let calls = 0;
    const p = poller(
      name,
      'c5',
      async () => {
        calls++;
        throw new Error('warehouse unreachable');
      },
      { maxRetries: 1000, retryBackoffMs: 5 },
    );
    await p.start();
    await until('a few retries', () => calls >= 3);
    await p.stop();
    expect(p.stats.deadLetters).toBe(0);
    const got: string[] = [];
    const q = poller(name, 'c5', async (event) => {
      got.push(...values(event));
    });
    await q.start();
    await until('redelivery', () => got.length >= 2);
    await q.stop();
    expect(got).toEqual(['p1', 'p2']);
  });

  it('an unknown item identifier fails the whole batch', async () => {
    const name = await stream();
    await put(name, ['u1', 'u2']);
    const batches: string[][] = [];
    const p = poller(
      name,
      'c6',
      async (event) => {
        batches.push(values(event));
        return batches.length === 1 ? { batchItemFailures: [{ itemIdentifier: 'no-such-sequence-number' }] } : { batchItemFailures: [] };
      },
      { bisectOnError: false },
    );
    await p.start();
    await until('second attempt', () => batches.length >= 2);
    await p.stop();
    expect(batches[1]).toEqual(['u1', 'u2']);
  });

  it('reads every shard, keeping each shard in order', async () => {
    const name = await stream(3);
    const out = await kinesis.send(
      new PutRecordsCommand({
        StreamName: name,
        Records: Array.from({ length: 90 }, (_, i) => ({ PartitionKey: `key${i % 9}`, Data: Buffer.from(`key${i % 9}:${i}`) })),
      }),
    );
    expect(out.FailedRecordCount ?? 0).toBe(0);
    const byKey = new Map<string, number[]>();
    const shards = new Set<string>();
    const p = poller(
      name,
      'c7',
      async (event) => {
        for (const r of event.Records) shards.add(r.eventID.split(':')[0]!);
        for (const v of values(event)) {
          const [k, n] = v.split(':') as [string, string];
          byKey.set(k, [...(byKey.get(k) ?? []), Number(n)]);
        }
      },
      { batchSize: 7 },
    );
    await p.start();
    await until('all shards', () => [...byKey.values()].reduce((a, v) => a + v.length, 0) >= 90);
    await p.stop();
    expect(shards.size).toBeGreaterThan(1);
    for (const [, ns] of byKey) expect(ns).toEqual([...ns].sort((a, b) => a - b));
  });
});
