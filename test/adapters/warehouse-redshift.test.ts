/**
 * The applier on Redshift (docs/warehouse-apply.md, "Redshift: the applier"), through the Redshift
 * stand-in on embedded PostgreSQL and a folder as the S3 stand-in: `createWarehouseApplier` with the
 * `RedshiftWarehouse` writer over one `RedshiftLoader`. Randomized over seeds (printed): the
 * loader's session fails at random statements (while staging's ledger read, a COPY, the ledger
 * row, the COMMIT, a merge), the control plane fails at random when the apply advances the
 * table's high-water mark (a crash after the load committed and before the offset moved), and
 * batches are delivered again as Kinesis does (from the first failed record; a whole batch again
 * at random, as after a crash before the checkpoint). After every step the view equals a model of
 * the history: nothing lost, nothing resurrected, an update without every column completed from the
 * key's row. Some notes are longer than Redshift's VARCHAR holds, under the `null-with-marker` policy:
 * NULL with the marker `note:too-long`, and a partial update or a key change's insert half that takes
 * such a note from the warehouse keeps the marker.
 */
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { beforeAll, describe, expect, it } from 'vitest';
import { RedshiftLoader, type RedshiftSession } from '../../lambda/adapters/redshift-loader.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import { createWarehouseApplier, type ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef, ControlPlane, DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { UNHELD_COLUMN, type ValuePolicy } from '../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';
import { applyWhileLoading } from '../helpers/registered-applier.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 6);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SINK = 'warehouse';
const notePolicy = (_table: string, column: string): ValuePolicy => (column === 'note' ? 'null-with-marker' : 'refuse-row');
const TABLE = 'public.items';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(10,2)', nullable: true },
  { name: 'doc', type: 'jsonb', nullable: true },
];

/** A note over 65,535 bytes (Redshift's VARCHAR), and how the model and the view name it: NULL with the marker `note:too-long`. */
const LONG_NOTE = 'é'.repeat(32_768);
const UNHELD_NOTE = '<unheld note:too-long>';
const modelNote = (note: string | null): string | null => (note === LONG_NOTE ? UNHELD_NOTE : note);

interface ModelRow {
  note: string | null;
  amount: string | null;
  doc: string | null;
}

describe('the applier on Redshift: crashes between staging, COPY, merge and offset advance (stand-in)', () => {
  const f = useRedshiftFixture({ database: 'rsa', clients: 1, utc: true });
  let client: pg.Client;
  let pool: pg.Pool;
  let folder: string;
  beforeAll(() => void ([client, pool, folder] = [f.clients[0]!, f.pool, f.folder]));

  it(`keeps the view equal to the model; every event is loaded before its offset moves (${RUNS} runs, seed ${SEED})`, async () => {
    console.log(`warehouse-redshift: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    const store = new FolderArchive(folder);
    const statements: string[] = [];
    let crashes = 0;
    let offsetCrashes = 0;
    let redeliveries = 0;
    let truncates = 0;
    let keyChanges = 0;
    let inheritedLong = 0;
    for (let run = 0; run < RUNS; run++) {
      const sourceId = `r${run}`;
      const mode: DeleteMode = rand() < 0.5 ? 'hard' : 'soft';
      const standIn = new RedshiftStandIn({ client, store, bucket: 'staging' });
      let failRate = 0;
      const session: RedshiftSession = {
        query: async (q) => {
          statements.push(q);
          if (q !== 'ROLLBACK' && rand() < failRate) {
            crashes++;
            // A failure before the statement ran, or after it ran and before its reply arrived.
            if (rand() < 0.5) await standIn.query(q);
            throw new Error('injected: the session failed');
          }
          return standIn.query(q);
        },
      };
      const loader = new RedshiftLoader({
        session,
        store,
        bucket: 'staging',
        prefix: `cdc/${sourceId}/`,
        roleArn: 'arn:aws:iam::123456789012:role/cdc-copy',
        ledgerSchema: `${sourceId}_loads`,
        policyOf: notePolicy,
      });
      const memory = new MemoryControlPlane();
      let offsetFailRate = 0;
      const controlPlane = new Proxy(memory, {
        get(target, prop, receiver) {
          const v = Reflect.get(target, prop, receiver) as unknown;
          if (prop !== 'advanceSinkProgress' || typeof v !== 'function') return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
          return async (...args: unknown[]) => {
            if (rand() < offsetFailRate) {
              offsetCrashes++;
              throw new Error('injected: the process died after the load committed, before the offset moved');
            }
            return (v as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      }) as ControlPlane;
      const at = new Date().toISOString();
      await memory.registerTable(
        { source: sourceId, table: TABLE, state: 'active', currentVersion: 1, deleteMode: mode, preImage: 'key', stateReason: null, updatedAt: at },
        { source: sourceId, table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
        { at, actor: 'test', action: 'register-table', source: sourceId, table: TABLE, outcome: 'done', detail: {} },
      );
      const applier = createWarehouseApplier({
        controlPlane,
        pool,
        sinkId: SINK,
        metrics: new Metrics({ namespace: 'test' }),
        logger: new Logger({ serviceName: 'test', logLevel: 'SILENT' }),
        writer: new RedshiftWarehouse({ loader, policyOf: notePolicy }),
        merge: { inline: false },
      });

      // A history over a few keys: inserts, full and partial updates (note not carried), deletes, truncates, and
      // primary-key changes whose insert half lacks the note (its two halves in either order, one position).
      const model = new Map<number, ModelRow | null>();
      const events: ChangeEvent[] = [];
      /** The note each key change's insert half takes from its old key, by the insert's index in `events`. */
      const donated = new Map<number, string | null>();
      for (let i = 1; i <= 60; i++) {
        const id = 1 + Math.floor(rand() * 6);
        const cur = model.get(id) ?? null;
        const r = rand();
        const free = [1, 2, 3, 4, 5, 6, 7, 8].filter((k) => (model.get(k) ?? null) === null);
        if (r > 0.95) {
          events.push(truncate(sourceId, i));
          model.clear();
          truncates++;
          continue;
        }
        if (cur !== null && r > 0.87 && free.length > 0) {
          const to = free[Math.floor(rand() * free.length)]!;
          const [del, ins] = keyChange(sourceId, i, id, to, { amount: (Math.floor(rand() * 100000) / 100).toFixed(2), doc: null });
          const pair = rand() < 0.5 ? [del, ins] : [ins, del];
          events.push(...pair);
          donated.set(events.indexOf(ins), cur.note);
          model.set(id, null);
          model.set(to, { note: cur.note, amount: ins.after!.amount as string, doc: null });
          keyChanges++;
          if (cur.note === LONG_NOTE) inheritedLong++;
          continue;
        }
        const row: ModelRow = {
          note: rand() < 0.2 ? null : rand() < 0.15 ? LONG_NOTE : `n${i}'"\n,é`,
          amount: (Math.floor(rand() * 100000) / 100).toFixed(2),
          doc: rand() < 0.5 ? null : JSON.stringify({ a: [1, 'x'], i }),
        };
        let e: ChangeEvent;
        const base = {
          v: ENVELOPE_VERSION,
          source: sourceId,
          table: TABLE,
          key: { id } as Row,
          before: null,
          missing: [] as string[],
          position: makePosition(BigInt(i) * 0x100n, 0),
          commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
          txId: String(i),
          schemaVersion: 1,
          capture: 'slot' as const,
          synthetic: false,
        };
        if (cur !== null && r < 0.2) {
          e = { ...base, op: 'delete', after: null };
          model.set(id, null);
        } else if (cur !== null && r < 0.5) {
          e = { ...base, op: 'update', after: { id, amount: row.amount, doc: row.doc }, missing: ['note'] };
          model.set(id, { ...row, note: cur.note });
          if (cur.note === LONG_NOTE) inheritedLong++;
        } else {
          e = { ...base, op: cur === null ? 'insert' : 'update', after: { id, ...row } };
          model.set(id, row);
        }
        events.push(e);
      }
      const records: ChangeRecord[] = events.map((e, i) => ({ sequenceNumber: String(1000 + i), origin: `s/shard-0/${1000 + i}`, text: JSON.stringify(e) }));

      const view = async (): Promise<Map<number, ModelRow>> => {
        const t = warehouseTable(sourceId, TABLE);
        // Before the first load that made the table, there is no view: nothing is visible.
        const exists = await client.query('SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2', [
          t.schema,
          t.view,
        ]);
        if (exists.rowCount === 0) return new Map();
        const rows = (await client.query(`SELECT id, note, amount, CAST(doc AS text) AS doc, ${UNHELD_COLUMN} AS unheld FROM ${rsQualified(t.schema, t.view)}`))
          .rows as {
          id: string;
          note: string | null;
          amount: string | null;
          doc: string | null;
          unheld: string | null;
        }[];
        // A NULL note is the model's long note only with its marker; any other marker is wrong.
        const note = (r: (typeof rows)[number]): string | null => {
          if (r.unheld !== null && r.unheld !== 'note:too-long') return `<unexpected marker ${r.unheld}>`;
          return r.unheld === null ? r.note : r.note === null ? UNHELD_NOTE : `<marked but not NULL: ${r.note.length}>`;
        };
        return new Map(rows.map((r) => [Number(r.id), { note: note(r), amount: r.amount, doc: r.doc === null ? null : JSON.stringify(JSON.parse(r.doc)) }]));
      };
      /**
       * The view after the first `upTo` events. `held`: the last of them is an insert half whose delete half comes next,
       * and it is held (its old key's image was not its batch's), so its key shows only once the delete half is loaded.
       */
      const expected = (upTo: number, held = false): Map<number, ModelRow> => {
        const m = new Map<number, ModelRow | null>();
        for (const [n, e] of events.slice(0, upTo).entries()) {
          if (held && n === upTo - 1) continue;
          const prev = m.get(Number(e.key.id)) ?? null;
          if (e.op === 'truncate') m.clear();
          else if (e.op === 'delete') m.set(Number(e.key.id), null);
          else {
            const a = e.after!;
            m.set(Number(e.key.id), {
              note: donated.has(n)
                ? modelNote(donated.get(n)!)
                : e.missing.includes('note')
                  ? (prev?.note ?? null)
                  : modelNote((a.note as string | null) ?? null),
              amount: (a.amount as string | null) ?? null,
              doc: a.doc === null || a.doc === undefined ? null : JSON.stringify(JSON.parse(a.doc as string)),
            });
          }
        }
        return new Map([...m].filter((x): x is [number, ModelRow] => x[1] !== null));
      };

      const heldAt = (k: number): boolean => k > 0 && donated.has(k - 1) && events[k]?.position === events[k - 1]!.position;
      // Deliver as a Kinesis shard does: a batch from the checkpoint; after a failure, again from the first failed record.
      let checkpoint = 0;
      let highest = 0;
      let delivered = 0;
      while (checkpoint < records.length) {
        const size = 1 + Math.floor(rand() * 12);
        const batch = records.slice(checkpoint, checkpoint + size);
        failRate = rand() < 0.4 ? 0.08 : 0;
        offsetFailRate = rand() < 0.3 ? 0.3 : 0;
        // The loader's cadence, squeezed: loads until the batch's apply returns (a load the injected failures break is retried).
        const outcome = await applyWhileLoading(applier, batch, () => loader.flush().catch(() => undefined));
        const firstFailed = outcome.failed.length === 0 ? batch.length : batch.findIndex((r) => outcome.failed.includes(r.sequenceNumber));
        // Everything before the first failed record is in the view: the offset may move past it.
        highest = Math.max(highest, checkpoint + firstFailed);
        failRate = 0;
        // A load whose COMMIT ran but whose reply was lost is in the view though its records failed: they come again. A load
        // never takes the view back (a redelivered older event ranks below what is there), so the view is the history up to
        // the longest prefix loaded so far.
        const seen = await view();
        // Up to the furthest record delivered so far: a batch whose load committed before it failed is in the view (a truncate
        // in it hides what is redelivered below it).
        delivered = Math.max(delivered, checkpoint + batch.length);
        const matches = Array.from({ length: Math.max(0, delivered - highest) + 1 }, (_, k) => highest + k).filter((k) =>
          [false, ...(heldAt(k) ? [true] : [])].some((held) => JSON.stringify([...expected(k, held)].sort()) === JSON.stringify([...seen].sort())),
        );
        expect(
          matches.length,
          `run ${run} (${mode}), after delivering ${checkpoint}..${checkpoint + batch.length}: ${JSON.stringify([...seen])}`,
        ).toBeGreaterThan(0);
        highest = Math.max(highest, matches[0]!);
        if (firstFailed < batch.length || rand() < 0.15) redeliveries++;
        // A crash before the checkpoint was written: the whole batch comes again.
        if (rand() >= 0.15) checkpoint += firstFailed;
        if (rand() < 0.3) {
          failRate = rand() < 0.5 ? 0.1 : 0;
          await loader.merge().catch(() => undefined);
          failRate = 0;
          const merged = await view();
          const held = heldAt(highest) && JSON.stringify([...merged].sort()) === JSON.stringify([...expected(highest, true)].sort());
          expect([...merged].sort(), `run ${run} (${mode}), after a merge`).toEqual([...expected(highest, held)].sort());
        }
      }
      await loader.merge();
      expect([...(await view())].sort(), `run ${run} (${mode}), merged`).toEqual([...expected(records.length)].sort());
      expect(memory.calls.get('putDeadLetter') ?? 0).toBe(0);
      // Every held insert half was completed and removed (docs/primary-key-changes.md, "On Redshift").
      const t = warehouseTable(sourceId, TABLE);
      expect(Number((await client.query(`SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.handover)}`)).rows[0].n), `run ${run}: handover`).toBe(0);
    }
    console.log(
      `warehouse-redshift: ${crashes} session failures, ${offsetCrashes} failed offset advances, ${redeliveries} redeliveries, ${truncates} truncates, ${keyChanges} key changes lacking the note, ${inheritedLong} long notes taken from the warehouse or the batch`,
    );
    const holds = statements.filter((q) => q.startsWith('COPY') && q.includes('_cdc_handover_')).length;
    const completions = statements.filter((q) => q.startsWith('INSERT INTO') && q.includes('_cdc_handover_')).length;
    console.log(`warehouse-redshift: ${holds} loads held insert halves, ${completions} held events completed (statements sent, crashed ones too)`);
    expect(crashes).toBeGreaterThan(0);
    expect(truncates).toBeGreaterThan(0);
    expect(keyChanges).toBeGreaterThan(0);
    expect(inheritedLong).toBeGreaterThan(0);
    expect(offsetCrashes).toBeGreaterThan(0);
    // What was sent is Redshift's grammar (the stand-in's own catalog reads are not sent through the session).
    const problems = [...new Set(statements)].flatMap((s) => redshiftProblems(s).map((p) => `${p}: ${s.slice(0, 160)}`));
    expect(problems).toEqual([]);
  }, 300_000);
});

/** The envelope of event `i` of table TABLE (position `i` × 0x100, commit second `i`). */
function envelope(source: string, i: number) {
  return {
    v: ENVELOPE_VERSION,
    source,
    table: TABLE,
    position: makePosition(BigInt(i) * 0x100n, 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
    txId: String(i),
    schemaVersion: 1,
    capture: 'slot' as const,
    synthetic: false,
  };
}

/** A truncate of TABLE at event `i`. */
function truncate(source: string, i: number): ChangeEvent {
  return { ...envelope(source, i), op: 'truncate', key: {}, after: null, before: null, missing: [] };
}

/** A primary-key change `from` → `to` at event `i` that leaves the note (a TOAST value) undelivered: its delete and insert halves. */
function keyChange(source: string, i: number, from: number, to: number, after: Row): [ChangeEvent, ChangeEvent] {
  const e = envelope(source, i);
  return [
    { ...e, op: 'delete', key: { id: from }, after: null, before: { id: from }, missing: [], handover: ['note'] },
    { ...e, op: 'insert', key: { id: to }, after: { id: to, ...after }, before: { id: from }, missing: ['note'] },
  ];
}
