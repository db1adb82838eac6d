/**
 * The lean DynamoDB client of `cdc local` (local/dynamodb-lean.ts; docs/local.md, "The lean
 * DynamoDB client") against the SDK client, both on real DynamoDB Local: random GetItem, PutItem,
 * UpdateItem and Query requests on two tables holding the same items, one through each client, give
 * equal results compared by type (binary values as Uint8Array, numbers as strings, `$metadata`) and
 * equal errors (a conditional check that failed, a validation error: class, name, message, fields);
 * the control plane's adapter works through it.
 *
 * Runs and seed: `CDC_LEAN_DYNAMODB_RUNS` (default 300 requests) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GetItemCommand, PutItemCommand, QueryCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { LeanDynamoDbClient } from '../../local/dynamodb-lean.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_LEAN_DYNAMODB_RUNS ?? 300);

let ddb: DynamoDbLocal;
let sdk: DynamoDBClient;
let lean: LeanDynamoDbClient;

beforeAll(async () => {
  ddb = await startDynamoDbLocal({ jvmOptions: QUICK_START_JVM_OPTIONS });
  sdk = dynamoDbClient(ddb.endpoint);
  lean = new LeanDynamoDbClient(ddb.endpoint);
  await Promise.all([createControlTable(sdk, 'via_sdk'), createControlTable(sdk, 'via_lean'), createControlTable(sdk, 'control')]);
});

afterAll(async () => {
  sdk?.destroy();
  lean?.destroy();
  await ddb?.stop();
});

/** A value with what differs between two equal responses (request ids, the table's name) replaced. */
function typed(v: unknown, key = ''): unknown {
  if (v instanceof Uint8Array) return { [Object.getPrototypeOf(v).constructor.name]: Array.from(v) };
  if (Array.isArray(v)) return v.map((x) => typed(x));
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) out[k] = typed((v as Record<string, unknown>)[k], k);
    return out;
  }
  if (['requestId', 'extendedRequestId'].includes(key)) return `<${typeof v}>`;
  // The table name is part of an error message: compared as if both used one table.
  if (typeof v === 'string') return { string: v.replaceAll('via_lean', 'via_sdk') };
  return { [typeof v]: v };
}

/** What a request gives: its output, or what it threw (class, name, message, fields), by type. */
async function outcome(p: Promise<unknown>): Promise<unknown> {
  try {
    return { output: typed(await p) };
  } catch (err) {
    const e = err as Error & Record<string, unknown>;
    return { error: { class: Object.getPrototypeOf(e).constructor.name, name: e.name, message: e.message, fields: typed({ ...e }) } };
  }
}

function randomValue(rand: () => number, depth = 0): AttributeValue {
  const int = (k: number): number => Math.floor(rand() * k);
  const text = (): string => ['', 'a', 'é ü', 'x'.repeat(1 + int(40)), '"quoted"\n\\', '😀', String(int(1000))][int(7)]!;
  switch (int(depth > 1 ? 7 : 9)) {
    case 0:
      return { S: text() || 's' };
    case 1:
      return { N: [String(int(1e6)), '-3.25', '1e20', '0.000001', '12345678901234567890123456789012345678'][int(5)]! };
    case 2:
      return { BOOL: rand() < 0.5 };
    case 3:
      return { NULL: true };
    case 4:
      return { SS: [...new Set(['a', 'b', 'c', 'd'].filter(() => rand() < 0.6).concat('z'))] };
    case 5:
      return { NS: [...new Set(['1', '2', '3.5', '-4'].filter(() => rand() < 0.6).concat('9'))] };
    case 6:
      return { S: text() || 't' };
    case 7:
      return { M: Object.fromEntries(Array.from({ length: int(4) }, (_, i) => [`m${i}`, randomValue(rand, depth + 1)])) };
    default:
      return { L: Array.from({ length: int(4) }, () => randomValue(rand, depth + 1)) };
  }
}

type Request = (table: string) => GetItemCommand | PutItemCommand | UpdateItemCommand | QueryCommand;

function randomRequest(rand: () => number): Request {
  const int = (k: number): number => Math.floor(rand() * k);
  const pk = `P${int(3)}`;
  const sk = `S${int(6)}`;
  const key = { pk: { S: pk }, sk: { S: sk } };
  const attrs = (): Record<string, AttributeValue> => Object.fromEntries(Array.from({ length: int(4) }, (_, i) => [`a${int(5)}${i}`, randomValue(rand)]));
  switch (int(5)) {
    case 0:
      return (t) => new GetItemCommand({ TableName: t, Key: key, ConsistentRead: rand() < 0.8 });
    case 1: {
      const item = { ...attrs(), ...key };
      const conditional = rand() < 0.4;
      const returnOld = rand() < 0.3;
      return (t) =>
        new PutItemCommand({
          TableName: t,
          Item: item,
          ...(conditional ? { ConditionExpression: 'attribute_not_exists(pk)' } : {}),
          ...(returnOld ? { ReturnValues: 'ALL_OLD' } : {}),
        });
    }
    case 2: {
      const v = randomValue(rand);
      const returns = (['NONE', 'ALL_NEW', 'UPDATED_OLD', 'ALL_OLD', 'UPDATED_NEW'] as const)[int(5)];
      const shape = int(4);
      return (t) =>
        new UpdateItemCommand({
          TableName: t,
          Key: key,
          ...(shape === 0
            ? { UpdateExpression: 'SET #v = :v, #c = if_not_exists(#c, :zero) + :one', ExpressionAttributeNames: { '#v': 'val', '#c': 'count' } }
            : shape === 1
              ? { UpdateExpression: 'SET #v = :v', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeNames: { '#v': 'val' } }
              : shape === 2
                ? { UpdateExpression: 'SET #v = :v REMOVE a00', ExpressionAttributeNames: { '#v': 'val' } }
                : // A validation error: a number added to what may not be one.
                  { UpdateExpression: 'SET #v = #v + :one', ExpressionAttributeNames: { '#v': 'val' } }),
          ExpressionAttributeValues: shape === 0 ? { ':v': v, ':zero': { N: '0' }, ':one': { N: '1' } } : shape === 3 ? { ':one': { N: '1' } } : { ':v': v },
          ReturnValues: returns,
        });
    }
    case 3: {
      const limit = rand() < 0.5 ? 1 + int(4) : undefined;
      const forward = rand() < 0.7;
      const start = rand() < 0.3 ? { pk: { S: pk }, sk: { S: `S${int(6)}` } } : undefined;
      const ranged = rand() < 0.4;
      return (t) =>
        new QueryCommand({
          TableName: t,
          KeyConditionExpression: ranged ? 'pk = :pk AND sk >= :sk' : 'pk = :pk',
          ExpressionAttributeValues: ranged ? { ':pk': { S: pk }, ':sk': { S: sk } } : { ':pk': { S: pk } },
          ConsistentRead: true,
          ScanIndexForward: forward,
          ...(limit !== undefined ? { Limit: limit } : {}),
          ...(start ? { ExclusiveStartKey: start } : {}),
        });
    }
    default: {
      // Binary values go through the SDK on the way in, and come back decoded from either path.
      const bytes = Uint8Array.from(Array.from({ length: int(6) + 1 }, () => int(256)));
      const item = { ...key, bin: { B: bytes }, bins: { BS: [bytes, Uint8Array.from([int(256), 7])] }, nested: { M: { b: { B: bytes } } } };
      return (t) => new PutItemCommand({ TableName: t, Item: item });
    }
  }
}

describe('the lean DynamoDB client', () => {
  it(`gives what the SDK gives, results and errors, by type (seed ${SEED}, ${RUNS} requests)`, async () => {
    console.log(`dynamodb-lean: seed ${SEED}, ${RUNS} requests (CDC_PROPERTY_SEED, CDC_LEAN_DYNAMODB_RUNS)`);
    const rand = seededRandom(SEED);
    const before = { ...lean.counts };
    let errors = 0;
    for (let i = 0; i < RUNS; i++) {
      const request = randomRequest(rand);
      const viaSdk = await outcome(sdk.send(request('via_sdk') as never));
      const viaLean = await outcome(lean.send(request('via_lean') as never));
      expect(viaLean, `seed ${SEED} request ${i}: ${JSON.stringify(request('t').input).slice(0, 300)}`).toStrictEqual(viaSdk);
      if ('error' in (viaSdk as object)) errors++;
    }
    console.log(
      `dynamodb-lean: ${lean.counts.lean - before.lean} answered lean, ${lean.counts.viaSdk - before.viaSdk} sent again through the SDK, ${errors} errors`,
    );
    // Both paths ran, and errors were among the requests.
    expect(lean.counts.lean - before.lean).toBeGreaterThan(RUNS / 4);
    expect(errors).toBeGreaterThan(0);
    // The items are the same in both tables at the end.
    for (const pk of ['P0', 'P1', 'P2']) {
      const q = (t: string) =>
        new QueryCommand({ TableName: t, KeyConditionExpression: 'pk = :pk', ExpressionAttributeValues: { ':pk': { S: pk } }, ConsistentRead: true });
      expect(typed((await lean.send(q('via_lean'))).Items)).toStrictEqual(typed((await sdk.send(q('via_sdk'))).Items));
    }
  });

  it('carries the control plane: the same answers as the SDK client for checkpoints, tables and conditional writes', async () => {
    const viaLean = new DynamoDbControlPlane(lean, 'control');
    await viaLean.putCheckpoint('c', 's', '0/10');
    expect(await viaLean.getCheckpoint('c', 's')).toBe('0/10');
    expect(await new DynamoDbControlPlane(sdk, 'control').getCheckpoint('c', 's')).toBe('0/10');
    expect(await viaLean.getCheckpoint('c', 'none')).toBeNull();
    expect(await viaLean.getTable('nobody', 'public.t')).toBeNull();
  });
});
