/**
 * The replay reader (lambda/adapters/replay-reader.ts, docs/rebuild.md) over real parts: the archive copier
 * writing a folder archive in the by-table layout, kinesalite as the change log. Random
 * histories over many seeds: events of three tables on two shards, duplicates (a record published
 * twice), the archive behind the stream by a random number of batches, batches copied again after
 * a "crash" (same first record, sometimes more records) by a copier that restarted (so it finds
 * its chain from the markers). Every run checks:
 * - the replay of one table over a random range equals the distinct events of that table in the
 *   range, in position order (archive/stream overlap and duplicates removed, nothing missing);
 * - the streamed replay (`ReplayReader.stream`, the rebuild's) hands over the same events in the
 *   same order with the same stats, or, when records left out of position order (some runs swap
 *   a few), stops with `ReplayOrderError`;
 * - no other table's objects were read;
 * - with a batch marker removed from the middle of a shard, the read fails with `ReplayHoleError`
 *   (never a silent gap); with a shard's first marker removed, the history check reports that the
 *   history is not complete from the beginning.
 * And: a read over its memory budget stops with `ReplayTooLargeError` (what it held counted across
 * archive and stream).
 *
 * Runs and seed: `CDC_REPLAY_READER_RUNS` (default 40; the pure chain and merge property in test/core/rebuild/replay.test.ts runs hundreds) and `CDC_PROPERTY_SEED` (default random,
 * printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DeleteStreamCommand, PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import type { KinesisStreamEvent } from 'aws-lambda';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { readChangeLog, type LogRecord } from '../../lambda/adapters/change-log-reader.ts';
import { distinctEvents } from '../../lambda/core/sink/apply-plan.ts';
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { ReplayHoleError, parseMarker } from '../../lambda/core/rebuild/replay.ts';
import { ReplayOrderError } from '../../lambda/core/rebuild/replay-order.ts';
import { createArchiveCopier } from '../../lambda/core/rebuild/archive.ts';
import { FolderArchive } from '../../local/archive.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { ReplayReader, defaultReplayBudget } from '../../lambda/adapters/replay-reader.ts';
import { sha256, type PayloadStore } from '../../lambda/core/shared/payload-store.ts';
import { replayEvent as event } from '../helpers/replay-events.ts';

const RUNS = Number(process.env.CDC_REPLAY_READER_RUNS ?? 40);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLES = ['public.a', 'public.b', 'public.c'];

let kin: Kinesalite;
let kinesis: KinesisClient;
let dir: string;
let streamedRuns = 0;
let outOfOrderRuns = 0;

beforeAll(async () => {
  kin = await startKinesalite();
  kinesis = kinesisClient(kin.endpoint);
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-replay-prop-'));
});

afterAll(async () => {
  kinesis?.destroy();
  await kin?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** The records of a shard as the copier's Kinesis event. */
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

async function oneRun(run: number, seed: number): Promise<void> {
  const stream = `replay-${run}`;
  await createStream(kinesis, stream, 2);
  try {
    await runOn(stream, run, seed);
  } finally {
    // kinesalite, like an account, holds at most 100 shards: a long run (CDC_REPLAY_READER_RUNS) must give them back.
    await kinesis.send(new DeleteStreamCommand({ StreamName: stream }));
  }
}

async function runOn(stream: string, run: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const archive = new FolderArchive(path.join(dir, `a${run}`));

  // A history: positions increase; some events are published twice (capture redelivery).
  const published: ChangeEvent[] = [];
  let lsn = 0x1000n;
  const n = 20 + Math.floor(rand() * 80);
  for (let i = 0; i < n; i++) {
    lsn += BigInt(1 + Math.floor(rand() * 50));
    const e = event(pick(TABLES), Math.floor(rand() * 12), makePosition(lsn, Math.floor(rand() * 3)), i);
    published.push(e);
    if (rand() < 0.15) published.push(e);
  }
  // Sometimes records leave out of position order (a shard's records then are too): the streamed replay must notice.
  if (rand() < 0.2)
    for (let k = 0; k < 3 && published.length > 1; k++) {
      const i = Math.floor(rand() * (published.length - 1));
      [published[i], published[i + 1]] = [published[i + 1]!, published[i]!];
    }
  for (let i = 0; i < published.length; i += 100) {
    await kinesis.send(
      new PutRecordsCommand({
        StreamName: stream,
        Records: published.slice(i, i + 100).map((e) => ({ PartitionKey: `${e.table}|${e.key.id}`, Data: Buffer.from(JSON.stringify(e)) })),
      }),
    );
  }
  // Not every record is an event (a line the reader skips, counted as invalid).
  if (rand() < 0.3) await kinesis.send(new PutRecordsCommand({ StreamName: stream, Records: [{ PartitionKey: 'junk', Data: Buffer.from('not json') }] }));

  // The copier archives a random prefix of each shard's batches; some batches are copied again.
  const byShard = new Map<string, LogRecord[]>();
  for await (const page of readChangeLog(kinesis, stream)) for (const r of page) byShard.set(r.shardId, [...(byShard.get(r.shardId) ?? []), r]);
  let copy = createArchiveCopier({ archive, layout: 'by-table' });
  const markerFiles = new Map<string, string[]>();
  for (const [shard, records] of byShard) {
    const batches: LogRecord[][] = [];
    for (let i = 0; i < records.length;) {
      const size = 1 + Math.floor(rand() * 12);
      batches.push(records.slice(i, i + size));
      i += size;
    }
    const archived = Math.floor(rand() * (batches.length + 1));
    for (let b = 0; b < archived; b++) {
      await copy(kinesisEvent(batches[b]!));
      if (rand() < 0.2) {
        // A crash after the put, before the checkpoint: a restarted copier gets the batch again, maybe with more records.
        copy = createArchiveCopier({ archive, layout: 'by-table' });
        const again = rand() < 0.5 || b + 1 >= batches.length ? batches[b]! : [...batches[b]!, ...batches[b + 1]!.slice(0, 1)];
        await copy(kinesisEvent(again));
      }
    }
    markerFiles.set(shard, (await archive.list(`change-log/batches/${shard}/`)).sort());
  }

  const reader = new ReplayReader({ archive, kinesis, stream });
  const table = pick(TABLES);
  const positions = published.map((e) => e.position).sort();
  const from = rand() < 0.5 ? '0'.repeat(24) : pick(positions);
  const to = rand() < 0.5 ? 'f'.repeat(24) : pick(positions);
  const range = { source: 'src', table, from, to };
  const want = distinctEvents(published.filter((e) => e.table === table && e.position >= from && e.position <= to));

  const check = await reader.checkHistory('src', table);
  expect(check.gaps, `run ${run} seed ${seed}`).toEqual([]);
  const got = await reader.read(range, check);
  expect(
    got.events.map((e) => `${e.position}|${e.key.id}|${e.after!.v}`),
    `run ${run} seed ${seed}`,
  ).toEqual(want.map((e) => `${e.position}|${e.key.id}|${e.after!.v}`));
  // The streamed replay (the rebuild's bulk): read's events in read's order and read's stats, or a named stop when a shard is out of order.
  const chunks: ChangeEvent[] = [];
  try {
    const it = reader.stream(range, check);
    let r = await it.next();
    for (; !r.done; r = await it.next()) chunks.push(...r.value);
    expect(chunks, `run ${run} seed ${seed}`).toEqual(got.events);
    expect(r.value.stats, `run ${run} seed ${seed}`).toEqual(got.stats);
    expect(r.value.resume, `run ${run} seed ${seed}`).toEqual(got.resume);
    streamedRuns++;
  } catch (err) {
    if (!(err instanceof ReplayOrderError)) throw err;
    outOfOrderRuns++;
  }
  // Only the table's own objects (and records naming no table) were read.
  const own = (await archive.list(`change-log/tables/src/${table}/`)).length + (await archive.list('change-log/tables/_other/')).length;
  expect(got.stats.objectsRead, `run ${run} seed ${seed}`).toBe(own);

  // A missing batch in the middle of a shard's chain: a named hole, never a silent gap.
  const middle = [...markerFiles.values()].find((l) => l.length >= 3);
  if (middle && rand() < 0.5) {
    const victim = middle[1 + Math.floor(rand() * (middle.length - 2))]!;
    const m = parseMarker(victim.slice('change-log/'.length))!;
    await unlink(path.join(dir, `a${run}`, victim));
    // The reference: a hole is an archived record of the shard, below the highest one still covered, that no remaining marker covers.
    const rest = (await archive.list(`change-log/batches/${m.shard}/`)).map((k) => parseMarker(k.slice('change-log/'.length))!);
    const seqs = byShard.get(m.shard)!.map((r) => BigInt(r.sequenceNumber));
    const inside = (s: bigint) => rest.some((o) => BigInt(o.firstSeq) <= s && s <= BigInt(o.lastSeq));
    const top = rest.reduce((x, o) => (BigInt(o.lastSeq) > x ? BigInt(o.lastSeq) : x), 0n);
    const hole = seqs.some((s) => s < top && !inside(s));
    if (hole) await expect(reader.read(range), `run ${run} seed ${seed}`).rejects.toBeInstanceOf(ReplayHoleError);
    else expect((await reader.read(range)).events.length, `run ${run} seed ${seed}`).toBe(want.length);
  } else {
    const first = [...markerFiles.values()].find((l) => l.length >= 1);
    if (first && rand() < 0.5) {
      await unlink(path.join(dir, `a${run}`, first[0]!));
      const rest = (await archive.list(`change-log/batches/${parseMarker(first[0]!.slice('change-log/'.length))!.shard}/`)).map((k) =>
        parseMarker(k.slice('change-log/'.length))!,
      );
      if (rest.length > 0 && rest.every((o) => o.prevSeq !== null))
        expect((await reader.checkHistory('src', table)).gaps.length, `run ${run} seed ${seed}`).toBeGreaterThan(0);
    }
  }
}

describe('replay reader over the archive and the stream (property)', () => {
  it(`reads one table in position order, deduplicated, across archive and stream, and names every hole (${RUNS} runs)`, async () => {
    console.log(`replay reader property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) await oneRun(run, Math.floor(rand() * 0x7fffffff));
    console.log(
      `replay reader property: the streamed replay equalled the sorted one in ${streamedRuns} runs and stopped (a shard out of order) in ${outOfOrderRuns}`,
    );
    expect(streamedRuns).toBeGreaterThan(0);
  }, 600_000);

  it("a stream that no longer holds the archive's last record is a hole (the change log was re-created: what lay between is lost)", async () => {
    const archive = new FolderArchive(path.join(dir, 'recreated'));
    await createStream(kinesis, 'recreated', 1);
    const e1 = event('public.a', 1, makePosition(0x10n, 0), 1);
    await kinesis.send(new PutRecordsCommand({ StreamName: 'recreated', Records: [{ PartitionKey: 'k', Data: Buffer.from(JSON.stringify(e1)) }] }));
    const records: LogRecord[] = [];
    for await (const page of readChangeLog(kinesis, 'recreated')) records.push(...page);
    await createArchiveCopier({ archive, layout: 'by-table' })(kinesisEvent(records));
    // Another stream under the same name: the archive's last record is not in it.
    await kinesis.send(new DeleteStreamCommand({ StreamName: 'recreated' }));
    // kinesalite stamps sequence numbers with the shard's creation time in whole seconds: a stream
    // re-created within the same second would give its first record the old one's sequence number.
    await new Promise((r) => setTimeout(r, 1100));
    await createStream(kinesis, 'recreated', 1);
    await new Promise((r) => setTimeout(r, 200));
    await kinesis.send(
      new PutRecordsCommand({
        StreamName: 'recreated',
        Records: [{ PartitionKey: 'k', Data: Buffer.from(JSON.stringify(event('public.a', 1, makePosition(0x20n, 0), 2))) }],
      }),
    );
    const reader = new ReplayReader({ archive, kinesis, stream: 'recreated' });
    const err = await reader.read({ source: 'src', table: 'public.a', from: '0'.repeat(24), to: 'f'.repeat(24) }).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(ReplayHoleError);
    expect((err as ReplayHoleError).message).toMatch(
      /history hole in shard shardId-000000000000 after sequence number \d+( before \d+)?: the stream no longer holds the archive.s last record/,
    );
  });

  it('reads archives in the batch layout (written before the by-table layout, or by Firehose), gzip included', async () => {
    const archive = new FolderArchive(path.join(dir, 'legacy'));
    await createStream(kinesis, 'legacy', 1);
    const evs = [
      event('public.a', 1, makePosition(0x10n, 0), 1),
      event('public.b', 2, makePosition(0x11n, 0), 2),
      event('public.a', 1, makePosition(0x12n, 0), 3),
    ];
    await kinesis.send(new PutRecordsCommand({ StreamName: 'legacy', Records: evs.map((e) => ({ PartitionKey: 'k', Data: Buffer.from(JSON.stringify(e)) })) }));
    const records: LogRecord[] = [];
    for await (const page of readChangeLog(kinesis, 'legacy')) records.push(...page);
    await createArchiveCopier({ archive })(kinesisEvent(records.slice(0, 2)));
    // A Firehose object: gzip, one record per line.
    const { gzipSync } = await import('node:zlib');
    const [key] = await archive.list('change-log/2');
    await archive.put(key!, gzipSync(await archive.get(key!)));
    const got = await new ReplayReader({ archive, kinesis, stream: 'legacy' }).read({
      source: 'src',
      table: 'public.a',
      from: '0'.repeat(24),
      to: 'f'.repeat(24),
    });
    expect(got.events.map((e) => e.after!.v)).toEqual([1, 3]);
    expect(got.stats.legacyObjects).toBe(1);
    expect(got.stats.shards[0]!.archivedThrough).toBe(records[1]!.sequenceNumber);
  });

  it('a replay over its budget stops with REPLAY_TOO_LARGE, naming the table and what to do; the events it held count across archive and stream', async () => {
    const archive = new FolderArchive(path.join(dir, 'budget'));
    await createStream(kinesis, 'budget', 1);
    const evs = [1, 2, 3, 4, 5, 6].map((i) => event(i % 3 === 0 ? 'public.b' : 'public.a', i, makePosition(BigInt(0x10 + i), 0), i));
    await kinesis.send(new PutRecordsCommand({ StreamName: 'budget', Records: evs.map((e) => ({ PartitionKey: 'k', Data: Buffer.from(JSON.stringify(e)) })) }));
    const records: LogRecord[] = [];
    for await (const page of readChangeLog(kinesis, 'budget')) records.push(...page);
    await createArchiveCopier({ archive, layout: 'by-table' })(kinesisEvent(records.slice(0, 3))); // the rest only in the stream
    const range = { source: 'src', table: 'public.a', from: '0'.repeat(24), to: 'f'.repeat(24) };
    const bytes = evs.filter((e) => e.table === 'public.a').reduce((n, e) => n + JSON.stringify(e).length, 0);
    const got = await new ReplayReader({ archive, kinesis, stream: 'budget', maxHeldBytes: bytes }).read(range);
    expect(got.events.map((e) => e.after!.v)).toEqual([1, 2, 4, 5]);
    expect(got.stats.archiveRecords + got.stats.streamRecords).toBeGreaterThan(4); // both parts read
    const err = await new ReplayReader({ archive, kinesis, stream: 'budget', maxHeldBytes: bytes - 1 }).read(range).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as { code?: string } | null)?.code).toBe('REPLAY_TOO_LARGE');
    expect(String(err)).toMatch(/replay of src\/public\.a .*holds 4 events.*--from/);
    // The default budget is a share of this process's heap.
    expect(defaultReplayBudget()).toBeGreaterThan(100 * 1024 * 1024);
  });

  it('reads an event stored out of line (a claim check) back from the payload store, in the archive and in the stream; without the store the replay stops', async () => {
    const archive = new FolderArchive(path.join(dir, 'claims'));
    await createStream(kinesis, 'claims', 1);
    const stored = new Map<string, Buffer>();
    const payloads: PayloadStore = {
      async put(key, body) {
        stored.set(key, body);
        return key;
      },
      async get(ref) {
        return stored.get(ref)!;
      },
    };
    const claimOf = async (e: ChangeEvent): Promise<string> => {
      const body = Buffer.from(JSON.stringify(e));
      const ref = await payloads.put(`claims/${e.position}.json`, body);
      return JSON.stringify({
        v: 1,
        claim: { ref, bytes: body.byteLength, sha256: sha256(body) },
        source: e.source,
        table: e.table,
        key: e.key,
        position: e.position,
      });
    };
    const evs = [
      event('public.a', 1, makePosition(0x10n, 0), 1),
      event('public.a', 2, makePosition(0x11n, 0), 2),
      event('public.a', 1, makePosition(0x12n, 0), 3),
      event('public.a', 3, makePosition(0x13n, 0), 4),
    ];
    // Inline, claim check (archived); inline, claim check (left in the stream).
    const lines = [JSON.stringify(evs[0]), await claimOf(evs[1]!), JSON.stringify(evs[2]), await claimOf(evs[3]!)];
    await kinesis.send(new PutRecordsCommand({ StreamName: 'claims', Records: lines.map((l) => ({ PartitionKey: 'k', Data: Buffer.from(l) })) }));
    const records: LogRecord[] = [];
    for await (const page of readChangeLog(kinesis, 'claims')) records.push(...page);
    await createArchiveCopier({ archive, layout: 'by-table' })(kinesisEvent(records.slice(0, 2)));
    const range = { source: 'src', table: 'public.a', from: '0'.repeat(24), to: 'f'.repeat(24) };
    const got = await new ReplayReader({ archive, kinesis, stream: 'claims', payloads }).read(range);
    expect(got.events.map((e) => `${e.position}|${e.after!.v}`)).toEqual(evs.map((e) => `${e.position}|${e.after!.v}`));
    expect(got.stats.archiveRecords).toBe(2);
    expect(got.stats.streamRecords).toBe(2);
    const err = await new ReplayReader({ archive, kinesis, stream: 'claims' }).read(range).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as { code?: string } | null)?.code).toBe('PAYLOAD_STORE_MISSING');
    // What the replay holds counts an event read back at its whole size, not its claim check's.
    const whole = evs.reduce((n, e) => n + JSON.stringify(e).length, 0);
    expect((await new ReplayReader({ archive, kinesis, stream: 'claims', payloads, maxHeldBytes: whole }).read(range)).events).toHaveLength(4);
    const over = await new ReplayReader({ archive, kinesis, stream: 'claims', payloads, maxHeldBytes: whole - 1 }).read(range).then(
      () => null,
      (e: unknown) => e,
    );
    expect((over as { code?: string } | null)?.code).toBe('REPLAY_TOO_LARGE');
  });
});
