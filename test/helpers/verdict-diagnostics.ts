/**
 * What an end-to-end test prints when a verdict does not match (docs/local.md, "Ports and names"):
 * the audit log, the sink's rows and min/max position per table (mirror, delta, changelog), and
 * the processes behind each port of the stack. A wrong sink can come from the pipeline or from a
 * stack that talked to another stack's server; these lines tell the two apart. Every part is
 * best effort: a part that cannot be read says why, and never hides the verdict.
 */
import path from 'node:path';
import pg from 'pg';
import { expect } from 'vitest';
import type { AuditEntry, SinkTableProgress } from '../../lambda/core/shared/control-plane.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { describeListeners } from '../../local/ports.ts';
import { startPostgres } from '../../local/postgres.ts';
import { openLocalControl } from '../../local/reconcile.ts';
import { readState, WAREHOUSE_DATABASE, type LocalStack } from '../../local/stack.ts';

export interface DiagnosticsInput {
  /** The stack's control plane (its audit log). */
  controlPlane: {
    listAudit(sourceId?: string): Promise<AuditEntry[]>;
    listTables(sourceId: string): Promise<Array<{ table: string }>>;
    listSinkProgress?(sink?: string): Promise<SinkTableProgress[]>;
  } | null;
  warehouseUrl: string | null;
  source: string;
  /** The tables to show the sink of. @default the tables registered in the control plane */
  tables?: readonly string[];
  /** Ports by what runs there (null: none). */
  ports: Record<string, number | null | undefined>;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The ports of an in-process stack, plus any the test started itself (e.g. an external warehouse). */
export function stackPorts(stack: LocalStack, extra: Record<string, number | null | undefined> = {}): Record<string, number | null | undefined> {
  return { 'stack postgres': stack.postgres?.port ?? null, 'stack dynamodb': stack.dynamodb.port, 'stack kinesalite': stack.kinesalite.port, ...extra };
}

/** Rows, live rows and min/max `_cdc_position` of each of a table's sink relations that exist. */
async function sinkPositions(client: pg.Client, sourceId: string, table: string): Promise<string[]> {
  const t = warehouseTable(sourceId, table);
  const out: string[] = [];
  for (const [what, rel] of [
    ['mirror', t.mirror],
    ['delta', t.delta],
    ['changelog', t.changelog],
  ] as const) {
    const name = qualified(t.schema, rel);
    const exists = await client.query<{ r: string | null }>('SELECT to_regclass($1)::text AS r', [name]);
    if (!exists.rows[0]!.r) {
      out.push(`  ${table} ${what}: none`);
      continue;
    }
    const r = await client.query<{ rows: number; min: string | null; max: string | null }>(
      `SELECT count(*)::int AS rows, min(_cdc_position) AS min, max(_cdc_position) AS max FROM ${name}`,
    );
    const row = r.rows[0]!;
    out.push(`  ${table} ${what}: ${row.rows} rows, position ${row.min ?? '-'} .. ${row.max ?? '-'}`);
  }
  return out;
}

/** The lines to print after a verdict that did not match. */
export async function verdictDiagnostics(input: DiagnosticsInput): Promise<string[]> {
  const out: string[] = [];
  try {
    const audit = input.controlPlane ? await input.controlPlane.listAudit(input.source) : null;
    if (audit === null) out.push('--- audit log: no control plane');
    else {
      const line = (e: AuditEntry): string => `  ${e.at} ${e.actor} ${e.action} ${e.table ?? '-'} ${e.outcome} ${JSON.stringify(e.detail)}`;
      const stops = audit.filter((e) => /hold|fail|refus|resnapshot|discontinu/.test(e.action) || e.outcome === 'refused');
      out.push(`--- audit log of ${input.source}: holds, failures and refusals first (${stops.length})`, ...stops.slice(-40).map(line));
      out.push(`--- audit log of ${input.source}: ${audit.length} entries${audit.length > 120 ? ' (last 120)' : ''}`);
      for (const e of audit.slice(-120)) out.push(line(e));
    }
  } catch (err) {
    out.push(`--- audit log: unreadable (${message(err)})`);
  }
  try {
    const progress = (await input.controlPlane?.listSinkProgress?.()) ?? [];
    out.push(`--- sink progress (${progress.length})`);
    for (const p of progress.filter((x) => x.source === input.source)) {
      out.push(
        `  ${p.sink} ${p.table}: applied ${p.appliedPosition ?? '-'}${p.heldFrom ? `, HELD from ${p.heldFrom} since ${p.heldAt ?? '?'} (holds ${p.holdCount ?? '?'}, release ${p.releaseRequested ?? 'not requested'})` : ''}`,
      );
    }
  } catch (err) {
    out.push(`--- sink progress: unreadable (${message(err)})`);
  }
  out.push('--- sink positions');
  const tables =
    input.tables ??
    (await input.controlPlane
      ?.listTables(input.source)
      .then((ts) => ts.map((t) => t.table))
      .catch(() => [] as string[])) ??
    [];
  if (!input.warehouseUrl) out.push('  no warehouse');
  else {
    const client = new pg.Client({ connectionString: input.warehouseUrl, connectionTimeoutMillis: 5000 });
    try {
      await client.connect();
      for (const table of tables)
        out.push(...(await sinkPositions(client, input.source, table).catch((err: unknown) => [`  ${table}: unreadable (${message(err)})`])));
    } catch (err) {
      out.push(`  warehouse unreachable (${message(err)})`);
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  out.push('--- processes behind the ports');
  for (const [what, port] of Object.entries(input.ports)) {
    if (port === null || port === undefined) continue;
    out.push(`  ${what} port ${port}: ${await describeListeners(port).catch((err: unknown) => `unknown (${message(err)})`)}`);
  }
  return out;
}

/**
 * The same for a `cdc local` run in its own process, from its state folder: the control plane of
 * the running stack, or DynamoDB Local started on the folder's data when the run is over; the
 * warehouse given, or the embedded one (started on its data folder for the duration when stopped).
 */
export async function stateDirDiagnostics(stateDir: string, o: { source: string; tables?: readonly string[]; warehouseUrl?: string }): Promise<string[]> {
  const state = readState(path.join(stateDir, 'state.json'));
  if (!state) return [`--- no state.json in ${stateDir}`];
  const ports = {
    'postgres (state.json)': state.ports.postgres,
    'dynamodb (state.json)': state.ports.dynamodb,
    'kinesalite (state.json)': state.ports.kinesis,
  };
  const local = await openLocalControl(stateDir).catch((err: unknown) => err as Error);
  const stops: Array<() => Promise<void>> = [];
  try {
    let warehouseUrl = o.warehouseUrl ?? null;
    if (!warehouseUrl && !(local instanceof Error) && local.embeddedUrl) warehouseUrl = local.embeddedUrl(WAREHOUSE_DATABASE);
    if (!warehouseUrl && state.postgresDataDir) {
      const cluster = await startPostgres({ dataDir: state.postgresDataDir, persistent: true }).catch(() => null);
      if (cluster) {
        stops.push(() => cluster.stop());
        warehouseUrl = cluster.url(WAREHOUSE_DATABASE);
      }
    }
    const lines = await verdictDiagnostics({
      controlPlane: local instanceof Error ? null : local.controlPlane,
      warehouseUrl,
      source: o.source,
      ...(o.tables ? { tables: o.tables } : {}),
      ports,
    });
    return local instanceof Error ? [`--- control plane unreachable (${local.message})`, ...lines] : lines;
  } finally {
    for (const stop of stops) await stop().catch(() => undefined);
    if (!(local instanceof Error)) await local.close();
  }
}

/**
 * Expects `marker` (e.g. `verdict: MATCH`) in a run's output; when it is missing, the failure
 * message is the output followed by the diagnostics.
 */
export async function expectVerdict(out: string, marker: string, diagnose: () => Promise<string[]>, earlier: Record<string, string> = {}): Promise<void> {
  if (out.includes(marker)) return;
  const lines = await diagnose().catch((err: unknown) => [`--- diagnostics failed: ${message(err)}`]);
  // A CI log keeps only part of a long failure: the verdict and the diagnostics come first, then
  // the tails of the outputs (no diff of the whole output).
  const verdict = out.split('\n').filter((l) => /^(verdict|  (ok  |FAIL) |       )/.test(l));
  const tail = (text: string, n: number): string[] => text.trimEnd().split('\n').slice(-n);
  const parts = [`expected "${marker}" in the output`, '--- verdict lines', ...verdict, ...lines];
  for (const [name, text] of Object.entries(earlier)) parts.push(`--- ${name} (last 40 lines)`, ...tail(text, 40));
  parts.push('--- output (last 80 lines)', ...tail(out, 80));
  expect.fail(parts.join('\n'));
}
