/**
 * Text keys holding a backslash on Redshift (docs/warehouse-apply.md, "Redshift: the applier"): a backslash inside a
 * Redshift string literal is an escape, inside a PostgreSQL one it is not, so the statements that name a key by its
 * value (a partial update's completion, a primary-key change's delete half and donor, a held event) write it as
 * literals joined by `CHR(92)` (`rsText`). Through the Redshift stand-in on embedded PostgreSQL, a folder as S3:
 * - `rsText` means the value itself, over random texts of backslashes, quotes, blanks and non-ASCII (seed printed),
 *   and passes the Redshift grammar check;
 * - a table keyed by such texts takes inserts, a partial update and a primary-key change lacking a column whose insert
 *   half comes first (held) and whose delete half comes after, to the rows the history says.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { numberedEvent } from '../helpers/numbered-event.ts';
import { RedshiftLoader } from '../../lambda/adapters/redshift-loader.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import type { ChangeEvent, Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { rsQualified, rsText } from '../../lambda/core/warehouse/redshift-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';
import { applyWhileLoading, quietApplier } from '../helpers/registered-applier.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLE = 'public.paths';
const COLUMNS: ColumnDef[] = [
  { name: 'code', type: 'text', nullable: false },
  { name: 'note', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(10,2)', nullable: true },
];

describe('text keys holding a backslash on Redshift (stand-in)', () => {
  const f = useRedshiftFixture({ database: 'rstk', clients: 2, utc: true });
  let client: pg.Client;
  beforeAll(() => void (client = f.clients[1]!));

  it(`rsText means the text itself on PostgreSQL and passes the Redshift grammar (400 texts, seed ${SEED})`, async () => {
    console.log(`redshift-text-keys: 400 texts, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    const alphabet = ['a', 'Z', '\\', "'", '"', ' ', 'é', '%', '\n', ',', ':'];
    for (let i = 0; i < 400; i++) {
      const text = Array.from({ length: Math.floor(rand() * 9) }, () => alphabet[Math.floor(rand() * alphabet.length)]!).join('');
      const sql = `SELECT ${rsText(text)} AS v`;
      expect(redshiftProblems(sql), sql).toEqual([]);
      expect((await client.query(sql)).rows[0].v, sql).toBe(text);
    }
    // Trailing blanks around a backslash stay (a CHAR would drop them).
    expect((await client.query(`SELECT ${rsText('a \\ ')} AS v`)).rows[0].v).toBe('a \\ ');
  });

  it('a table keyed by texts with backslashes: inserts, a partial update, a held primary-key change completed by its delete half', async () => {
    const source = 'tk';
    const memory = new MemoryControlPlane();
    const at = new Date().toISOString();
    await memory.registerTable(
      { source, table: TABLE, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source, table: TABLE, version: 1, columns: COLUMNS, key: ['code'], effectivePosition: makePosition(0n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source, table: TABLE, outcome: 'done', detail: {} },
    );
    const store = new FolderArchive(f.folder);
    const statements: string[] = [];
    const session = new RedshiftStandIn({ client: f.clients[0]!, store, bucket: 'staging' });
    const traced = new RedshiftLoader({
      session: { query: (q) => (statements.push(q), session.query(q)) },
      store,
      bucket: 'staging',
      prefix: `cdc/${source}/`,
      roleArn: 'arn:aws:iam::123456789012:role/cdc-copy',
      ledgerSchema: `${source}_loads`,
    });
    const applier = quietApplier(memory, f.pool, new RedshiftWarehouse({ loader: traced }));
    let seq = 0;
    const deliver = async (events: ChangeEvent[]): Promise<string[]> => {
      const records: ChangeRecord[] = events.map((e) => ({ sequenceNumber: String(++seq), origin: `s/shard-0/${seq}`, text: JSON.stringify(e) }));
      return (await applyWhileLoading(applier, records, () => traced.flush().catch(() => undefined))).failed;
    };
    // A transaction id with a backslash too (the truncations' and markers' texts are written the same way).
    const ev = (n: number, op: ChangeEvent['op'], key: Row, after: Row | null, o: Partial<ChangeEvent> = {}): ChangeEvent =>
      numberedEvent(TABLE, source, n, op, key, after, { txId: `tx\\${n}`, ...o });
    const dir = 'C:\\dir\\';
    const quoted = "x'\\y ";
    const moved = '\\\\srv\\share';
    expect(
      await deliver([
        ev(1, 'insert', { code: dir }, { code: dir, note: 'first', amount: '1.00' }),
        ev(2, 'insert', { code: quoted }, { code: quoted, note: 'second', amount: '2.00' }),
      ]),
    ).toEqual([]);
    // The note unchanged (not logged): completed from the view by the key.
    expect(await deliver([ev(3, 'update', { code: dir }, { code: dir, amount: '3.00' }, { missing: ['note'] })])).toEqual([]);
    // UPDATE … SET code = moved WHERE code = quoted, the note unchanged: the insert half first (held), the delete half after.
    const keyChange = { before: { code: quoted } };
    expect(await deliver([ev(4, 'insert', { code: moved }, { code: moved, amount: '4.00' }, { ...keyChange, missing: ['note'] })])).toEqual([]);
    expect(await deliver([ev(4, 'delete', { code: quoted }, null, { ...keyChange, handover: ['note'] })])).toEqual([]);
    await traced.merge();
    const t = warehouseTable(source, TABLE);
    const rows = (await client.query(`SELECT code, note, amount FROM ${rsQualified(t.schema, t.view)} ORDER BY code`)).rows;
    expect(rows).toEqual(
      [
        { code: dir, note: 'first', amount: '3.00' },
        { code: moved, note: 'second', amount: '4.00' },
      ].sort((a, b) => (a.code < b.code ? -1 : 1)),
    );
    expect(Number((await client.query(`SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.handover)}`)).rows[0].n)).toBe(0);
    expect(statements.some((s) => s.includes('CHR(92)'))).toBe(true);
    for (const s of new Set(statements)) expect(redshiftProblems(s), s.slice(0, 200)).toEqual([]);
  }, 120_000);
});
