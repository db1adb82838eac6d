/**
 * The heartbeat row of one source (docs/architecture.md §2, invariant 10): `<schema>.cdc_heartbeat`
 * on the source database, created on first use and upserted with `beat_at = now()` by the
 * heartbeat writer (lambda/handlers/heartbeat-writer.ts) and by `cdc local`.
 */
import pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE, ServiceName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { isSourceId } from '../core/shared/event.ts';
import { assertPlainIdentifier, quoteIdent } from '../core/shared/identifiers.ts';
import { readSourceIdentity } from './source-facts-pg.ts';

export interface HeartbeatWriterOptions {
  source: string;
  /** Schema of the heartbeat table. @default public */
  schema?: string;
  /** Connection settings of the source database (resolved on first use). */
  connection: pg.ClientConfig | (() => Promise<pg.ClientConfig>);
}

/** Writes the heartbeat row of one source over one connection (reconnecting after an error). The local pipeline uses it directly. */
export class HeartbeatWriter {
  readonly source: string;
  readonly table: string;
  private client: pg.Client | null = null;
  private identity: { systemIdentifier: string; timeline: number } | null = null;

  constructor(private readonly o: HeartbeatWriterOptions) {
    if (!isSourceId(o.source)) throw new ConfigurationError(`source id must be a lower-case identifier, got ${JSON.stringify(o.source)}`);
    const schema = assertPlainIdentifier(o.schema ?? DEFAULT_HEARTBEAT_SCHEMA, 'heartbeat schema');
    this.source = o.source;
    this.table = `${quoteIdent(schema)}.${quoteIdent(HEARTBEAT_TABLE)}`;
  }

  /** Upserts `(source_id, beat_at = now())`, creating the table if it is missing. */
  async beat(): Promise<void> {
    const client = await this.connect();
    try {
      // Each beat carries the next sequence number and who the source is (lambda/core/capture/continuity.ts checks them).
      await client.query(
        `INSERT INTO ${this.table} AS h (source_id, beat_at, seq, system_identifier, timeline) VALUES ($1, now(), 1, $2, $3)
           ON CONFLICT (source_id) DO UPDATE SET beat_at = now(), seq = h.seq + 1, system_identifier = EXCLUDED.system_identifier, timeline = EXCLUDED.timeline`,
        [this.source, this.identity?.systemIdentifier ?? null, this.identity?.timeline ?? null],
      );
    } catch (e) {
      await this.close();
      throw e;
    }
  }

  /** Closes the connection (the next beat opens a new one). */
  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    if (c) await c.end().catch(() => undefined);
  }

  private async connect(): Promise<pg.Client> {
    if (this.client) return this.client;
    const config = typeof this.o.connection === 'function' ? await this.o.connection() : this.o.connection;
    const client = new pg.Client({ application_name: ServiceName.HEARTBEAT_WRITER, ...config });
    // A connection dropped between beats must not crash the process; the next beat reconnects.
    client.on('error', () => {
      if (this.client === client) this.client = null;
    });
    await client.connect();
    try {
      const exists = await client.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [this.table]);
      if (exists.rows[0]?.t === null || exists.rows[0]?.t === undefined) {
        await client.query(
          `CREATE TABLE IF NOT EXISTS ${this.table} (source_id text PRIMARY KEY, beat_at timestamptz NOT NULL, seq bigint NOT NULL DEFAULT 0, system_identifier text, timeline integer)`,
        );
      } else if (
        (await client.query(`SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'seq' AND NOT attisdropped`, [this.table])).rowCount === 0
      ) {
        // A table from before the sequence number: migrate it once (the existing row continues from 0).
        await client.query(
          `ALTER TABLE ${this.table} ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS system_identifier text, ADD COLUMN IF NOT EXISTS timeline integer`,
        );
      }
      // Who the source is; null where this user may not read the control data (the check is then skipped).
      this.identity = await readSourceIdentity(client);
    } catch (e) {
      await client.end().catch(() => undefined);
      throw e;
    }
    this.client = client;
    return client;
  }
}
