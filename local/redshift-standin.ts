/**
 * A Redshift stand-in: PostgreSQL running the Redshift dialect's statements with the Redshift
 * behaviour the dialect relies on (docs/warehouse-apply.md, "Redshift: what is checked here"):
 * - `COPY <t> (cols) FROM 's3://<bucket>/<manifest>' IAM_ROLE '…' MANIFEST FORMAT AS CSV GZIP …`
 *   reads the manifest and every object it lists from the local S3 stand-in (an `Archive`: a
 *   folder or s3rver), gunzips them and loads them with the same CSV rules (an unquoted empty
 *   field is NULL, `""` an empty string, VARBYTE as hex, SUPER as JSON text). Any other COPY
 *   option is refused: the stand-in runs only what the loader sends.
 * - a row over 4 MB fails the COPY;
 * - `varchar(n)` holds n BYTES (a domain with `octet_length(VALUE) <= n`), `varbyte(n)` n bytes,
 *   `super` a JSON value of at most 4 MB; a value over fails the statement, as in Redshift.
 * - Quoted identifiers are folded to lower case, so `"Orders"` and `"orders"` are one name.
 * - `MERGE`: PostgreSQL's, which like Redshift's fails when a target row matches two source rows.
 * - `TO_HEX(varbyte)` and `JSON_SERIALIZE(super)` are functions of the stand-in's (`FUNCTION_SQL`): hex, and the JSON text.
 * - `SVV_COLUMNS` is a view of the stand-in's (`CATALOG_SQL`) over PostgreSQL's `information_schema.columns` that
 *   answers as Redshift's does: a `varchar(n)` column is `character varying` of n (bytes), a `varbyte(n)` one `varbyte`
 *   of n, a `super` one `super` (PostgreSQL alone would name the domains' base types).
 */
import { gunzipSync } from 'node:zlib';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { Archive } from '../lambda/core/rebuild/archive.ts';
import { CdcError } from '../lambda/core/shared/errors.ts';
import { parseManifest } from '../lambda/core/warehouse/redshift-load.ts';
import { REDSHIFT_MAX_ROW_BYTES, REDSHIFT_MAX_SUPER_BYTES } from '../lambda/core/warehouse/redshift-types.ts';
import { COPY_FORMAT } from '../lambda/core/warehouse/redshift-sql.ts';
import type { RedshiftSession } from '../lambda/adapters/redshift-loader.ts';

/** A statement the stand-in does not run the way Redshift would. */
export class StandInUnsupportedError extends CdcError {
  constructor(what: string, sql: string) {
    super('REDSHIFT_STANDIN_UNSUPPORTED', `the Redshift stand-in does not run ${what}: ${sql.slice(0, 200)}`);
  }
}

/** Splits SQL text into runs outside and inside quotes, so rewrites never touch literals. */
function mapOutsideLiterals(sql: string, f: (code: string) => string, ident: (name: string) => string): string {
  let out = '';
  let i = 0;
  let code = '';
  while (i < sql.length) {
    const ch = sql[i]!;
    if (ch === "'" || ch === '"') {
      out += f(code);
      code = '';
      let j = i + 1;
      let body = '';
      for (;;) {
        if (j >= sql.length) throw new CdcError('REDSHIFT_STANDIN_SYNTAX', `unterminated ${ch} in: ${sql.slice(0, 200)}`);
        if (sql[j] === ch && sql[j + 1] === ch) {
          body += ch + ch;
          j += 2;
        } else if (sql[j] === ch) break;
        else body += sql[j++];
      }
      out += ch === '"' ? `"${ident(body)}"` : `'${body}'`;
      i = j + 1;
    } else {
      code += ch;
      i++;
    }
  }
  return out + f(code);
}

/** Redshift functions PostgreSQL has not (or not for these types): `public.rs_<name>`, made on first use (`FUNCTION_SQL`). */
const FUNCTION = /\b(to_hex|json_serialize)\s*\(/gi;
const FUNCTION_SQL: Record<string, string> = {
  rs_to_hex: "CREATE FUNCTION public.rs_to_hex(bytea) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT encode($1, ''hex'')'",
  rs_json_serialize: "CREATE FUNCTION public.rs_json_serialize(jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS 'SELECT CAST($1 AS text)'",
};

/** Redshift's catalog view of table columns, answered by a view of the stand-in's (`public.rs_svv_columns`), made on first use. */
const CATALOG = /\bsvv_columns\b/gi;
const CATALOG_SQL =
  'CREATE VIEW public.rs_svv_columns AS SELECT c.table_schema, c.table_name, c.column_name, c.ordinal_position, ' +
  "CASE WHEN c.domain_name ~ '^rs_varchar_[0-9]+$' THEN 'character varying' WHEN c.domain_name ~ '^rs_varbyte_[0-9]+$' THEN 'varbyte' " +
  "WHEN c.domain_name = 'rs_super' THEN 'super' ELSE c.data_type END AS data_type, " +
  "CASE WHEN c.domain_name ~ '^rs_var(char|byte)_[0-9]+$' THEN CAST(substring(c.domain_name FROM '[0-9]+$') AS integer) " +
  'ELSE c.character_maximum_length END AS character_maximum_length, c.numeric_precision, c.numeric_scale FROM information_schema.columns c';

const DOMAIN = /\b(varchar|character varying|varbyte)\s*\(\s*(\d+)\s*\)|\bsuper\b/gi;

/** Redshift folds names; Redshift types become byte-limited domains. */
export function toPostgres(sql: string, domains: Set<string>): string {
  return mapOutsideLiterals(
    sql,
    (code) =>
      code
        .replace(DOMAIN, (m: string, kind: string | undefined, n: string | undefined) => {
          const name = kind === undefined ? 'rs_super' : `rs_${kind.toLowerCase() === 'varbyte' ? 'varbyte' : 'varchar'}_${n}`;
          domains.add(name);
          return `public.${name}`;
        })
        .replace(FUNCTION, (m: string, name: string) => `public.rs_${name.toLowerCase()}(`)
        .replace(CATALOG, 'public.rs_svv_columns'),
    (name) => name.toLowerCase(),
  );
}

function domainSql(name: string): string {
  if (name === 'rs_super') return `CREATE DOMAIN public.rs_super AS jsonb CHECK (octet_length(CAST(VALUE AS text)) <= ${REDSHIFT_MAX_SUPER_BYTES})`;
  const m = /^rs_(varchar|varbyte)_(\d+)$/.exec(name)!;
  return `CREATE DOMAIN public.${name} AS ${m[1] === 'varbyte' ? 'bytea' : 'text'} CHECK (octet_length(VALUE) <= ${m[2]})`;
}

const COPY_RE = new RegExp(
  `^COPY\\s+(\\S+)\\s+\\(([^)]*)\\)\\s+FROM\\s+'(s3://[^']+)'\\s+IAM_ROLE\\s+'[^']+'\\s+MANIFEST\\s+${COPY_FORMAT.replace(/[()']/g, (c) => `\\${c}`)}(?:\\s+REGION\\s+'[a-z0-9-]+')?$`,
  's',
);

/** COPY loads rows of at most 4 MB: a longer line (outside quotes, a newline ends a row) fails the load, as on Redshift. */
function checkRows(csv: Buffer, url: string): void {
  let start = 0;
  let quoted = false;
  for (let i = 0; i < csv.length; i++) {
    const b = csv[i];
    if (b === 0x22) quoted = !quoted;
    else if (b === 0x0a && !quoted) {
      if (i - start > REDSHIFT_MAX_ROW_BYTES)
        throw new CdcError('REDSHIFT_STANDIN_COPY', `${url}: a row of ${i - start} bytes, COPY loads at most ${REDSHIFT_MAX_ROW_BYTES}`);
      start = i + 1;
    }
  }
}

export interface RedshiftStandInOptions {
  /** A PostgreSQL client (PostgreSQL 15 or later: MERGE). */
  client: pg.ClientBase;
  /** The S3 stand-in holding the staged objects, and the bucket its keys are in. */
  store: Archive;
  bucket: string;
}

/** A `RedshiftSession` over PostgreSQL. */
export class RedshiftStandIn implements RedshiftSession {
  private copies = 0;

  constructor(private readonly o: RedshiftStandInOptions) {}

  async query(sql: string): Promise<{ rows: Record<string, unknown>[] }> {
    if (/^\s*COPY\b/i.test(sql)) {
      await this.copy(sql);
      return { rows: [] };
    }
    const used = new Set<string>();
    const text = toPostgres(sql, used);
    for (const d of used) {
      // Looked up every time: CREATE DOMAIN is transactional, so one made inside a caller's transaction that rolled back is gone again.
      const exists = await this.o.client.query(
        'SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1 AND t.typname = $2',
        ['public', d],
      );
      if (exists.rowCount === 0) await this.o.client.query(domainSql(d));
    }
    for (const f of Object.keys(FUNCTION_SQL)) if (text.includes(`public.${f}(`)) await this.makeFunction(f);
    if (text.includes('public.rs_svv_columns')) await this.makeCatalog();
    const r = await this.o.client.query(text);
    return { rows: (Array.isArray(r) ? (r.at(-1) as pg.QueryResult) : r).rows as Record<string, unknown>[] };
  }

  /** A stand-in function (`FUNCTION_SQL`), made when missing. */
  private async makeFunction(name: string): Promise<void> {
    const exists = await this.o.client.query('SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2', [
      'public',
      name,
    ]);
    if (exists.rowCount === 0) await this.o.client.query(FUNCTION_SQL[name]!);
  }

  /** The stand-in's `SVV_COLUMNS` (`CATALOG_SQL`), made when missing; another session making it at the same moment is no error. */
  private async makeCatalog(): Promise<void> {
    const exists = async (): Promise<boolean> =>
      (
        await this.o.client.query('SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2', [
          'public',
          'rs_svv_columns',
        ])
      ).rowCount !== 0;
    if (await exists()) return;
    try {
      await this.o.client.query(CATALOG_SQL);
    } catch (err) {
      if (!(await exists())) throw err;
    }
  }

  /** The objects a manifest URI lists, read, checked and decompressed. */
  private async objects(uri: string): Promise<Buffer[]> {
    const key = this.keyOf(uri);
    const m = parseManifest((await this.o.store.get(key)).toString('utf8'), uri);
    const out: Buffer[] = [];
    for (const e of m.entries) {
      const body = await this.o.store.get(this.keyOf(e.url));
      if (e.meta?.content_length !== undefined && e.meta.content_length !== body.length) {
        throw new CdcError('REDSHIFT_STANDIN_COPY', `${e.url}: ${body.length} bytes, the manifest says ${e.meta.content_length}`);
      }
      const csv = gunzipSync(body);
      checkRows(csv, e.url);
      out.push(csv);
    }
    return out;
  }

  private keyOf(uri: string): string {
    const prefix = `s3://${this.o.bucket}/`;
    if (!uri.startsWith(prefix)) throw new CdcError('REDSHIFT_STANDIN_COPY', `${uri} is not in the staging bucket ${this.o.bucket}`);
    return uri.slice(prefix.length);
  }

  private async copy(sql: string): Promise<void> {
    const m = COPY_RE.exec(sql.trim());
    if (!m) throw new StandInUnsupportedError("a COPY other than the loader's (… MANIFEST FORMAT AS CSV GZIP …)", sql);
    const table = toPostgres(m[1]!, new Set());
    const columns = toPostgres(m[2]!, new Set())
      .split(',')
      .map((c) => c.trim());
    const c = this.o.client;
    const types = await c.query<{ attname: string; type: string }>(
      `SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = CAST($1 AS regclass) AND attnum > 0 AND NOT attisdropped`,
      [table],
    );
    const typeOf = new Map(types.rows.map((r) => [`"${r.attname}"`, r.type]));
    const stage = `cdc_standin_copy_${++this.copies}`;
    await c.query(`CREATE TEMP TABLE ${stage} (${columns.map((col, i) => `c${i} text`).join(', ')})`);
    try {
      for (const body of await this.objects(m[3]!)) {
        await pipeline(Readable.from([body]), c.query(copyFrom(`COPY ${stage} FROM STDIN WITH (FORMAT csv)`)));
      }
      const exprs = columns.map((col, i) => {
        const t = typeOf.get(col);
        if (t === undefined) throw new CdcError('REDSHIFT_STANDIN_COPY', `${table} has no column ${col}`);
        return t.startsWith('rs_varbyte') ? `CAST(decode(c${i}, 'hex') AS ${t})` : `CAST(c${i} AS ${t})`;
      });
      await c.query(`INSERT INTO ${table} (${columns.join(', ')}) SELECT ${exprs.join(', ')} FROM ${stage}`);
    } finally {
      await c.query(`DROP TABLE ${stage}`);
    }
  }
}
