/**
 * The KPL aggregated record codec (contracts/kpl-aggregate.ts) against an independent
 * implementation, awslabs' kinesis-aggregation for Node (`aws-kinesis-agg`, protobufjs inside):
 * randomized round trips both ways (seed printed), refusals of corrupt input, and the order of
 * sub-record ids (`compareSequenceNumbers`).
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { AggregateFormatError, decodeAggregate, deaggregate, encodeAggregate, isAggregate, KPL_MAGIC, type UserRecord } from '../../contracts/kpl-aggregate.ts';
import { kinesisSequenceOf, subSequenceId, unpackChangeLogRecord, AGGREGATE_KEY_PREFIX } from '../../contracts/change-log-record.ts';
import { compareSequenceNumbers } from '../../lambda/core/sink/apply-plan.ts';
import { rng } from '../helpers/rng.ts';
import { ChangeLogRecords } from '../../lib/change-log-records.ts';
import { changeLogAggregationSetting } from '../../lambda/runtime/environment.ts';

const require = createRequire(import.meta.url);
interface ProtoType {
  encode(m: unknown): { finish(): Uint8Array };
  decode(b: Uint8Array): unknown;
  fromObject(o: unknown): unknown;
}
const agg = require('aws-kinesis-agg') as {
  deaggregateSync(
    r: { data: string },
    checksums: boolean,
    cb: (err: Error | null, records?: Array<{ partitionKey: string; explicitPartitionKey?: string; data: string }>) => void,
  ): void;
};
const common = require('aws-kinesis-agg/lib/common.js') as { AggregatedRecord: ProtoType };

const SEED = Number(process.env.CDC_TEST_SEED ?? Date.now() % 1_000_000);
const RUNS = 300;

/** Records with their data as hex (compared as text: fast, and exact). */
function hex(records: ReadonlyArray<{ partitionKey: string; explicitHashKey?: string; data: Buffer }>): unknown[] {
  return records.map((r) => ({ ...r, data: r.data.toString('hex') }));
}

function randomRecords(r: () => number): UserRecord[] {
  const n = 1 + Math.floor(r() * 40);
  const keys = Array.from({ length: 1 + Math.floor(r() * 6) }, (_, i) => `k${i}-${'é'.repeat(Math.floor(r() * 3))}${Math.floor(r() * 1e9)}`);
  const ehks = Array.from({ length: 1 + Math.floor(r() * 3) }, () =>
    ((BigInt(Math.floor(r() * 2 ** 52)) << 76n) | BigInt(Math.floor(r() * 2 ** 40))).toString(),
  );
  return Array.from({ length: n }, () => {
    const len = r() < 0.1 ? 200 + Math.floor(r() * 3000) : Math.floor(r() * 150);
    const data = Buffer.alloc(len);
    for (let i = 0; i < len; i++) data[i] = Math.floor(r() * 256);
    const rec: UserRecord = { partitionKey: keys[Math.floor(r() * keys.length)]!, data };
    if (r() < 0.3) rec.explicitHashKey = ehks[Math.floor(r() * ehks.length)]!;
    return rec;
  });
}

/** Their encoder: protobufjs's AggregatedRecord, wrapped in magic and MD5 as the KPL does. */
function theirEncode(records: readonly UserRecord[]): Buffer {
  const pks: string[] = [];
  const ehks: string[] = [];
  const msg = {
    partition_key_table: pks,
    explicit_hash_key_table: ehks,
    records: records.map((r) => {
      if (!pks.includes(r.partitionKey)) pks.push(r.partitionKey);
      const out: Record<string, unknown> = { partition_key_index: pks.indexOf(r.partitionKey), data: r.data };
      if (r.explicitHashKey !== undefined) {
        if (!ehks.includes(r.explicitHashKey)) ehks.push(r.explicitHashKey);
        out.explicit_hash_key_index = ehks.indexOf(r.explicitHashKey);
      }
      return out;
    }),
  };
  const body = Buffer.from(common.AggregatedRecord.encode(common.AggregatedRecord.fromObject(msg)).finish());
  return Buffer.concat([KPL_MAGIC, body, createHash('md5').update(body).digest()]);
}

function theirDecode(data: Buffer): Array<{ partitionKey: string; explicitHashKey?: string; data: Buffer }> {
  let out: Array<{ partitionKey: string; explicitHashKey?: string; data: Buffer }> = [];
  agg.deaggregateSync({ data: data.toString('base64') }, true, (err, records) => {
    if (err) throw err;
    out = (records ?? []).map((u) => ({
      partitionKey: u.partitionKey,
      ...(u.explicitPartitionKey ? { explicitHashKey: u.explicitPartitionKey } : {}),
      data: Buffer.from(u.data, 'base64'),
    }));
  });
  return out;
}

describe(`KPL aggregated records (seed ${SEED}, ${RUNS} runs)`, () => {
  it('what we encode, the independent implementation decodes to the same records (keys, hash keys, bytes)', () => {
    console.log(`kpl-aggregate round trips: seed ${SEED}, runs ${RUNS}`);
    const r = rng(SEED);
    for (let run = 0; run < RUNS; run++) {
      const records = randomRecords(r);
      const ours = encodeAggregate(records);
      expect(isAggregate(ours), `run ${run}`).toBe(true);
      // Their decoder gives a record without an explicit hash key index the table's first key (protobufjs's
      // default index 0), so the hash key is compared where the record has one; the bytes check below covers the rest.
      const theirs = theirDecode(ours);
      expect(hex(theirs.map((u, i) => (records[i]!.explicitHashKey === undefined ? { partitionKey: u.partitionKey, data: u.data } : u))), `run ${run}`).toEqual(
        hex(records),
      );
      // Byte for byte what protobufjs writes for the same message (same field order, same key tables).
      expect(ours.equals(theirEncode(records)), `run ${run}: bytes differ`).toBe(true);
    }
  });

  it('what the independent implementation encodes, we decode to the same records', () => {
    const r = rng(SEED + 1);
    for (let run = 0; run < RUNS; run++) {
      const records = randomRecords(r);
      const theirs = theirEncode(records);
      expect(hex(decodeAggregate(theirs, `run ${run}`).records), `run ${run}`).toEqual(hex(records));
      expect(
        deaggregate(theirs, `run ${run}`).map((d) => d.toString('hex')),
        `run ${run}`,
      ).toEqual(records.map((x) => x.data.toString('hex')));
    }
  });

  it('a record without the magic is one plain record', () => {
    const plain = Buffer.from('{"source":"shop"}', 'utf8');
    expect(isAggregate(plain)).toBe(false);
    expect(deaggregate(plain, 'here')).toEqual([plain]);
    expect(unpackChangeLogRecord(plain, 'k', 'shardId-000000000000', 'here')).toEqual({ kind: 'events', texts: ['{"source":"shop"}'], aggregate: false });
  });

  it('refuses a bad checksum and every truncation, naming where and what', () => {
    const r = rng(SEED + 2);
    for (let run = 0; run < 50; run++) {
      const good = encodeAggregate(randomRecords(r));
      const flipped = Buffer.from(good);
      const at = KPL_MAGIC.length + Math.floor(r() * (good.length - KPL_MAGIC.length));
      flipped[at] = flipped[at]! ^ (1 + Math.floor(r() * 255));
      expect(() => decodeAggregate(flipped, `shard/${run}`)).toThrowError(AggregateFormatError);
      expect(() => decodeAggregate(flipped, `shard/${run}`)).toThrowError(new RegExp(`^shard/${run}: not a valid KPL aggregated record: `));
      const cut = good.subarray(0, KPL_MAGIC.length + Math.floor(r() * (good.length - KPL_MAGIC.length)));
      expect(() => decodeAggregate(cut, `shard/${run}`)).toThrowError(AggregateFormatError);
    }
    const short = Buffer.concat([KPL_MAGIC, Buffer.from([1, 2])]);
    expect(() => decodeAggregate(short, 'x/1')).toThrowError(
      'x/1: not a valid KPL aggregated record: truncated: 6 bytes, fewer than the magic and the 16-byte MD5',
    );
    // A checksum that matches a message cut inside a record: refused as truncated, naming the record.
    const body = encodeAggregate([{ partitionKey: 'a', data: Buffer.from('hello') }]).subarray(KPL_MAGIC.length, -16);
    const cutBody = body.subarray(0, body.length - 2);
    const forged = Buffer.concat([KPL_MAGIC, cutBody, createHash('md5').update(cutBody).digest()]);
    expect(() => decodeAggregate(forged, 'x/2')).toThrowError(/x\/2: not a valid KPL aggregated record: truncated: record 0 declares/);
    expect(unpackChangeLogRecord(flippedOnce(), 'k', 's', 'x/3').kind).toBe('invalid');
  });

  it('skips an aggregate read from another shard than the one its partition key names', () => {
    const data = encodeAggregate([
      { partitionKey: 'a', data: Buffer.from('{"n":1}') },
      { partitionKey: 'b', data: Buffer.from('{"n":2}') },
    ]);
    expect(unpackChangeLogRecord(data, `${AGGREGATE_KEY_PREFIX}shardId-000000000001`, 'shardId-000000000002', 'x')).toEqual({
      kind: 'other-shard',
      meantFor: 'shardId-000000000001',
    });
    expect(unpackChangeLogRecord(data, `${AGGREGATE_KEY_PREFIX}shardId-000000000002`, 'shardId-000000000002', 'x')).toEqual({
      kind: 'events',
      texts: ['{"n":1}', '{"n":2}'],
      aggregate: true,
    });
  });
});

function flippedOnce(): Buffer {
  const b = encodeAggregate([{ partitionKey: 'a', data: Buffer.from('{"n":1}') }]);
  b[b.length - 1] = b[b.length - 1]! ^ 0xff;
  return b;
}

describe(`sub-record ids (seed ${SEED})`, () => {
  it('order by sequence number, then sub-sequence number, the plain record first; the Kinesis sequence number comes back', () => {
    const r = rng(SEED + 3);
    for (let run = 0; run < 2000; run++) {
      const digits = (n: number) => String(1 + Math.floor(r() * 9)) + Array.from({ length: n - 1 }, () => Math.floor(r() * 10)).join('');
      const a = digits(1 + Math.floor(r() * 56));
      const b = r() < 0.3 ? a : digits(1 + Math.floor(r() * 56));
      const sa = r() < 0.3 ? null : Math.floor(r() * 2000);
      const sb = r() < 0.3 ? null : Math.floor(r() * 2000);
      const ida = sa === null ? a : subSequenceId(a, sa);
      const idb = sb === null ? b : subSequenceId(b, sb);
      const big = BigInt(a) - BigInt(b);
      const want = big !== 0n ? Math.sign(Number(big)) : Math.sign((sa ?? -1) - (sb ?? -1));
      expect(Math.sign(compareSequenceNumbers(ida, idb)), `${ida} vs ${idb}`).toBe(want);
      expect(kinesisSequenceOf(ida)).toBe(a);
    }
  });
});

describe('ChangeLogRecords.eventsOf (the package export for consumers of your own) and CDC_CHANGE_LOG_AGGREGATION', () => {
  it('gives the events of an aggregate, a plain record as itself, nothing for an aggregate of another shard, and refuses a corrupt one', () => {
    const agg = encodeAggregate([
      { partitionKey: 'a', data: Buffer.from('{"n":1}') },
      { partitionKey: 'b', data: Buffer.from('{"n":"é"}') },
    ]);
    const key = `${AGGREGATE_KEY_PREFIX}shardId-000000000003`;
    expect(ChangeLogRecords.eventsOf(agg.toString('base64'), 'shardId-000000000003', key)).toEqual(['{"n":1}', '{"n":"é"}']);
    expect(ChangeLogRecords.eventsOf(agg.toString('base64'), 'shardId-000000000004', key)).toEqual([]);
    expect(ChangeLogRecords.eventsOf(Buffer.from('{"n":2}').toString('base64'), 'shardId-000000000004', 'k')).toEqual(['{"n":2}']);
    expect(() => ChangeLogRecords.eventsOf(flippedOnce().toString('base64'), 'shardId-000000000003', key)).toThrowError(
      'record of shardId-000000000003: not a valid KPL aggregated record: the MD5 checksum does not match the message (corrupt or truncated)',
    );
  });

  it('the setting is on unless off; anything else is refused by name', () => {
    expect(changeLogAggregationSetting(undefined)).toBe(true);
    expect(changeLogAggregationSetting('on')).toBe(true);
    expect(changeLogAggregationSetting('off')).toBe(false);
    expect(() => changeLogAggregationSetting('yes')).toThrowError('CDC_CHANGE_LOG_AGGREGATION: expected on or off, got "yes"');
  });
});
