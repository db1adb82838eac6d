/**
 * The capture's streaming read (local/slot-stream.ts) against embedded PostgreSQL: the slot moves
 * only after the records were published and the checkpoint written (a crash between publish and
 * acknowledgement re-reads, never skips), keepalives are answered (the walsender's timeout never
 * ends the stream), "caught up" waits for what was committed before the time asked, the
 * replication messages are encoded as the protocol says, and a randomized crash test: crashes at
 * random steps of the stream (hung before or after publishing, after the checkpoint, after the
 * slot moved, or the walsender killed under it), with the checkpoint written after every batch or
 * published batches waiting for it, restart, and the published set equals the committed changes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import type { ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { SlotCapture, captureCheckpointName, type CaptureOptions } from '../../local/capture.ts';
import type { RawPublisher } from '../../local/raw-publisher.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { compareLsn, readSlot } from '../../local/slot.ts';
import { formatLsn, lsnToBigInt, SlotStream, statusUpdate } from '../../local/slot-stream.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until, capturedViews } from './helpers.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const CRASH_RUNS = Number(process.env.CDC_CAPTURE_CRASH_RUNS ?? 8);

let cluster: PostgresCluster;
let n = 0;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});
afterAll(async () => {
  await cluster?.stop();
});

async function connect(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

interface Env {
  source: string;
  url: string;
  sql: pg.Client;
  controlPlane: MemoryControlPlane;
  published: SlotRecord[];
  options: CaptureOptions;
}

async function env(): Promise<Env> {
  const sourceId = `cs${++n}`;
  await cluster.createDatabase(sourceId);
  const url = cluster.url(sourceId);
  const sql = await connect(url);
  await sql.query('CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); CREATE TABLE other (id int PRIMARY KEY)');
  const controlPlane = new MemoryControlPlane();
  const published: SlotRecord[] = [];
  const options: CaptureOptions = {
    source: sourceId,
    sourceUrl: url,
    tables: new TableConfigIndex([{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }]),
    controlPlane,
    publish: async (records) => void published.push(...records.flatMap((r) => capturedViews(r.data))),
    idleMs: 20,
    read: 'stream',
  };
  return { source: sourceId, url, sql, controlPlane, published, options };
}

/** Ends every session of the capture of `source` (its SQL session and its walsender), as a killed process would. */
async function killSessions(sql: pg.Client, sourceId: string): Promise<void> {
  await sql.query('SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()', [
    `cdc-local-capture-${sourceId}`,
  ]);
}

const never = new Promise<never>(() => undefined);

describe('replication messages', () => {
  it('encodes LSNs and standby status updates as the protocol says', () => {
    expect(formatLsn(0, 0x16b3748)).toBe('0/16B3748');
    expect(formatLsn(0x1a, 0xff)).toBe('1A/FF');
    expect(lsnToBigInt('1A/FF')).toBe((0x1an << 32n) | 0xffn);
    expect(lsnToBigInt('0/16B3748')).toBe(0x16b3748n);
    expect(() => lsnToBigInt('nope')).toThrow(/not an LSN/);
    const at = Date.UTC(2026, 11, 2, 0, 0, 0);
    const b = statusUpdate(0x200n, 0x100n, true, at);
    expect(b.length).toBe(34);
    expect(String.fromCharCode(b[0]!)).toBe('r');
    expect(b.readBigUInt64BE(1)).toBe(0x200n); // written
    expect(b.readBigUInt64BE(9)).toBe(0x100n); // flushed: what moves the slot
    expect(b.readBigUInt64BE(17)).toBe(0x100n); // applied
    expect(b.readBigInt64BE(25)).toBe(BigInt(at - Date.UTC(2000, 0, 1)) * 1000n); // microseconds since 2000-01-01
    expect(b[33]).toBe(1);
    expect(statusUpdate(1n, 1n, false, at)[33]).toBe(0);
  });
});

describe('slot capture, streaming', () => {
  it('moves the slot only after the records were published and checkpointed: a crash between publish and ack re-reads them on restart', async () => {
    const e = await env();
    const c0 = new SlotCapture(e.options);
    await c0.start();
    await c0.stop();
    const start = (await readSlot(e.sql, c0.slot))!.confirmedFlushLsn!;
    // The publisher accepts the records and then the process "dies" before the checkpoint.
    const publishedOnce: SlotRecord[] = [];
    const crashing: RawPublisher = async (records) => {
      publishedOnce.push(...records.flatMap((r) => capturedViews(r.data)));
      return never;
    };
    const c1 = new SlotCapture({ ...e.options, publish: crashing });
    await c1.start();
    await e.sql.query('INSERT INTO t VALUES (1, 1), (2, 1)');
    await until('the publish', () => publishedOnce.length === 2);
    // Published, not acknowledged: the slot and the checkpoint have not moved, the stream is still open.
    const during = await readSlot(e.sql, c1.slot);
    expect(during!.confirmedFlushLsn).toBe(start);
    expect(during!.active).toBe(true);
    expect(await e.controlPlane.getCheckpoint(captureCheckpointName(e.source), c1.slot)).toBe(start);
    expect(c1.caughtUpSince(Date.now())).toBe(false);
    await killSessions(e.sql, e.source);
    // Restart: the same transaction is read again (at least once), then the next one.
    const c2 = new SlotCapture(e.options);
    await c2.start();
    await e.sql.query('INSERT INTO t VALUES (3, 1)');
    await until('the replay and the next insert', () => e.published.length === 3);
    const since = Date.now();
    await until('caught up', () => c2.caughtUpSince(since));
    await c2.stop();
    expect(e.published.map((r) => r.columns![0]!.value)).toEqual([1, 2, 3]);
    expect(e.published.slice(0, 2).map((r) => `${r.commitLsn}#${r.index}`)).toEqual(publishedOnce.map((r) => `${r.commitLsn}#${r.index}`));
    const slot = await readSlot(e.sql, c2.slot);
    expect(slot!.confirmedFlushLsn).toBe(e.published[2]!.commitLsn);
    expect(await e.controlPlane.getCheckpoint(captureCheckpointName(e.source), c2.slot)).toBe(e.published[2]!.commitLsn);
    await e.sql.end();
  });

  it('a stream the server refuses (its slot is gone) fails at once and lets its connection go: it never waits on a paused socket', async () => {
    // START_REPLICATION on a missing slot fails the stream, which pauses its socket; ending the
    // connection must still finish (the capture retries, finds the slot gone and stops loudly).
    const sourceId = `cs${++n}`;
    await cluster.createDatabase(sourceId);
    const url = cluster.url(sourceId);
    const admin = await connect(url);
    try {
      const lsn = String((await admin.query('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn);
      for (let i = 0; i < 5; i++) {
        const t0 = Date.now();
        const err = await SlotStream.open({
          url,
          slot: 'no_such_slot',
          startLsn: lsn,
          applicationName: 'cdc-test-refused',
          maxTxRows: 1000,
          maxTxBytes: 1 << 20,
          highWaterRows: 100,
        }).then(
          () => null,
          (e: unknown) => e,
        );
        expect(String(err)).toMatch(/no_such_slot.*does not exist|does not exist/);
        expect(Date.now() - t0).toBeLessThan(1_500); // not the end's 2 s bound: the end itself came
      }
      // Nothing left behind: no session of that application is still connected.
      await until(
        'the refused sessions gone',
        async () => (await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'cdc-test-refused'")).rows[0].n === 0,
        5_000,
      );
    } finally {
      await admin.end();
    }
  });

  it('answers keepalives: a walsender timeout shorter than the idle time does not end the stream', async () => {
    const e = await env();
    await e.sql.query(`ALTER DATABASE ${e.source} SET wal_sender_timeout = '1s'`);
    const errors: unknown[] = [];
    // Probes (which also report the position) only every 4 s: within that, only the replies to the server's keepalives keep the stream alive.
    const c = new SlotCapture({ ...e.options, idleMs: 4_000, onError: (err) => errors.push(err) });
    await c.start();
    await until('streaming', async () => (await readSlot(e.sql, c.slot))!.active);
    const pid = (await readSlot(e.sql, c.slot))!.activePid;
    await new Promise((r) => setTimeout(r, 3_500));
    await e.sql.query('INSERT INTO t VALUES (1, 1)');
    await until('the insert', () => e.published.length === 1);
    expect((await readSlot(e.sql, c.slot))!.activePid).toBe(pid);
    await c.stop();
    expect(errors).toEqual([]);
    await e.sql.end();
  });

  it('is caught up only once what was committed before the time asked is published, and also when only uncaptured tables changed', async () => {
    const e = await env();
    let hold: Promise<void> | null = null;
    const publish: RawPublisher = async (records) => {
      await hold;
      e.published.push(...records.flatMap((r) => capturedViews(r.data)));
    };
    const c = new SlotCapture({ ...e.options, publish });
    await c.start();
    const started = Date.now();
    await until('caught up at start', () => c.caughtUpSince(started));
    // Only an uncaptured table changes: the stream still reaches the flushed WAL.
    await e.sql.query('INSERT INTO other VALUES (1)');
    const t0 = Date.now();
    await until('caught up after an uncaptured change', () => c.caughtUpSince(t0));
    let open: () => void = () => undefined;
    hold = new Promise((r) => (open = r));
    await e.sql.query('INSERT INTO t VALUES (1, 1)');
    const t1 = Date.now();
    await new Promise((r) => setTimeout(r, 300));
    expect(c.caughtUpSince(t1)).toBe(false);
    open();
    await until('caught up after the publish', () => c.caughtUpSince(t1));
    expect(e.published).toHaveLength(1);
    await c.stop();
    await e.sql.end();
  });

  it('refuses to start without a free WAL sender, naming the setting (the SQL peek needs none)', async () => {
    const none = await startPostgres({ fast: true, settings: { max_wal_senders: '0' } });
    try {
      await none.createDatabase('src');
      const sql = await connect(none.url('src'));
      await sql.query('CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)');
      await sql.end();
      const options: CaptureOptions = {
        source: 'nosender',
        sourceUrl: none.url('src'),
        tables: new TableConfigIndex([{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }]),
        controlPlane: new MemoryControlPlane(),
        publish: async () => undefined,
      };
      await expect(new SlotCapture(options).start()).rejects.toThrow(/WAL senders are in use.*max_wal_senders/s);
      const peek = new SlotCapture({ ...options, read: 'peek' });
      await peek.start();
      await peek.stop();
    } finally {
      await none.stop();
    }
  });

  it(`randomized crashes at random steps of the stream: after restarts the published set equals the committed changes (seed ${SEED}, ${CRASH_RUNS} runs)`, async () => {
    console.log(`capture-stream crash test: seed ${SEED}, ${CRASH_RUNS} runs (CDC_PROPERTY_SEED, CDC_CAPTURE_CRASH_RUNS)`);
    const rand = seededRandom(SEED);
    const int = (k: number): number => Math.floor(rand() * k);
    type Kind = 'before-publish' | 'after-publish' | 'after-checkpoint' | 'after-ack' | 'kill-walsender';
    const kinds: Kind[] = ['before-publish', 'after-publish', 'after-checkpoint', 'after-ack', 'kill-walsender'];
    const tally = new Map<Kind, number>();
    for (let run = 0; run < CRASH_RUNS; run++) {
      const e = await env();
      const label = `seed ${SEED} run ${run}`;
      // The committed changes: row id → its versions, in commit order (inserts, updates, deletes).
      const expected = new Set<string>();
      const rows = new Map<number, number>();
      let nextId = 1;
      const writeSome = async (count: number): Promise<void> => {
        for (let i = 0; i < count; i++) {
          const size = 1 + int(6);
          const changes: string[] = [];
          for (let j = 0; j < size; j++) {
            const ids = [...rows.keys()];
            const pick = int(3);
            if (pick === 0 || ids.length === 0) {
              const id = nextId++;
              rows.set(id, 1);
              changes.push(`INSERT INTO t VALUES (${id}, 1)`);
              expected.add(`insert ${id} 1`);
            } else {
              const id = ids[int(ids.length)]!;
              if (pick === 1) {
                const v = rows.get(id)! + 1;
                rows.set(id, v);
                changes.push(`UPDATE t SET v = ${v} WHERE id = ${id}`);
                expected.add(`update ${id} ${v}`);
              } else {
                rows.delete(id);
                changes.push(`DELETE FROM t WHERE id = ${id}`);
                expected.add(`delete ${id}`);
              }
            }
          }
          if (int(4) === 0) changes.push(`INSERT INTO other VALUES (${nextId++})`); // an uncaptured change in the transaction
          await e.sql.query(`BEGIN; ${changes.join('; ')}; COMMIT`);
        }
      };
      const first = new SlotCapture({ ...e.options, peekChanges: 1 + int(8) });
      await first.start();
      await first.stop();
      const crashes = 1 + int(3);
      for (let round = 0; round < crashes; round++) {
        const kind = kinds[int(kinds.length)]!;
        tally.set(kind, (tally.get(kind) ?? 0) + 1);
        // The crash comes at the k-th step of its kind (a step is one publish or one control-plane write).
        const at = 1 + int(4);
        let seen = 0;
        let crashed = false;
        const hangHere = (): boolean => {
          if (crashed) return true;
          if (++seen < at) return false;
          crashed = true;
          return true;
        };
        const publish: RawPublisher = async (records) => {
          if (crashed) return never;
          if (kind === 'before-publish' && hangHere()) return never;
          await e.options.publish(records);
          if (kind === 'after-publish' && hangHere()) return never;
        };
        const controlPlane = new Proxy(e.controlPlane, {
          get(target, prop, receiver) {
            if (prop === 'putCheckpoint') {
              return async (consumer: string, shard: string, value: string): Promise<void> => {
                if (crashed) return never;
                const ackedShard = shard.endsWith('#acked');
                if (kind === 'after-ack' && ackedShard && hangHere()) return never;
                await target.putCheckpoint(consumer, shard, value);
                if (kind === 'after-checkpoint' && !ackedShard && value !== 'creating' && hangHere()) return never;
              };
            }
            const v = Reflect.get(target, prop, receiver) as unknown;
            return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
          },
        }) as ControlPlane;
        // The checkpoint after every batch, or published batches waiting for it (a crash re-reads them).
        const checkpointIntervalMs = [0, 30, 1000, 60_000][int(4)]!;
        const checkpointEveryBatches = [1, 3, 100][int(3)]!;
        const c = new SlotCapture({
          ...e.options,
          controlPlane,
          publish,
          peekChanges: 1 + int(8),
          checkpointIntervalMs,
          checkpointEveryBatches,
          onError: () => undefined,
        });
        // The crash can come while it starts (the first `#acked` write is there).
        await Promise.race([c.start(), until(`${label}: crash while starting`, () => crashed)]);
        await writeSome(2 + int(8));
        if (kind === 'kill-walsender' && !crashed) {
          // The stream's walsender is killed under a running capture: it reconnects by itself.
          await new Promise((r) => setTimeout(r, int(50)));
          await e.sql.query('SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL', [
            c.slot,
          ]);
          await writeSome(1 + int(4));
          const since = Date.now();
          await until(`${label}: caught up after the walsender was killed`, () => c.caughtUpSince(since));
          await c.stop();
        } else {
          const since = Date.now();
          // Crashed (hung at its step) or, when the step never came, caught up.
          await until(`${label}: crash or catch-up`, () => crashed || c.caughtUpSince(since));
          await killSessions(e.sql, e.source);
          if (!crashed) await c.stop();
        }
      }
      const last = new SlotCapture(e.options);
      await last.start();
      await writeSome(1 + int(3));
      const since = Date.now();
      await until(`${label}: the last capture catches up`, () => last.caughtUpSince(since));
      await last.stop();
      // At least once, and a position always carries the same change.
      const byPosition = new Map<string, string>();
      for (const r of e.published) {
        const id = (r.op === 'delete' ? r.oldKey : r.columns)!.find((col) => col.name === 'id')!.value as number;
        const what = r.op === 'delete' ? `delete ${id}` : `${r.op} ${id} ${r.columns!.find((col) => col.name === 'v')!.value as number}`;
        const pos = `${r.commitLsn}#${r.index}`;
        expect(byPosition.get(pos) ?? what, `${label}: position ${pos}`).toBe(what);
        byPosition.set(pos, what);
      }
      // Nothing skipped, nothing invented. (A row updated to the same version twice is impossible: versions only grow.)
      expect(new Set(byPosition.values()), label).toEqual(expected);
      expect(byPosition.size, label).toBe(expected.size);
      // The slot ends exactly at the checkpoint: the last published commit.
      const lastCommit = [...byPosition.keys()].map((p) => p.split('#')[0]!).reduce((a, b) => (compareLsn(a, b) >= 0 ? a : b));
      expect((await readSlot(e.sql, last.slot))!.confirmedFlushLsn, label).toBe(lastCommit);
      // The cluster holds at most 20 slots: a long run (CDC_CAPTURE_CRASH_RUNS) gives each run's back.
      await e.sql.query('SELECT pg_drop_replication_slot($1)', [last.slot]);
      await e.sql.end();
    }
    console.log(`capture-stream crash test: crash kinds ${JSON.stringify(Object.fromEntries(tally))}`);
  });
});
