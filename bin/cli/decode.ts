/**
 * `cdc decode [FILE]`: raw capture records (DMS or slot format, detected per line) in, canonical
 * change events out, both as JSON lines. See `DECODE` (its help) for the contract.
 */
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { decodeRawRecord, type DecodeContext } from '../../lambda/core/capture/decode.ts';
import type { DecodedChange } from '../../lambda/core/capture/decoded.ts';
import { isSourceId } from '../../lambda/core/shared/event.ts';
import { applyColumnRulesToChange } from '../../lambda/core/tables/masking.ts';
import { parseJsonExact } from '../../lambda/core/shared/json-exact.ts';
import { comparePositions } from '../../lambda/core/shared/position.ts';
import { parseTableConfig, TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command, type CommandSpec } from './command.ts';
import { on, parseCommandLine, text, texts, use, VOCABULARY } from './options.ts';

export const DEFAULT_SOURCE = 'cli';

export const DECODE: CommandSpec = {
  name: 'decode',
  summary: 'decode raw capture records (DMS or slot, JSON lines) into canonical change events',
  usage: ['[FILE] [options]'],
  description: `Reads raw capture records as JSON lines from FILE (or stdin) and prints the canonical change
events they stand for as JSON lines on stdout. Each line may be a DMS Kinesis record or a
slot-capture record ("format": "cdc-slot/1"); the format is detected per line.

Output: one event per line, in the change event's shape (v, source, table, op, key, after,
before, missing, position, commitTs, txId, schemaVersion, capture, synthetic) with
"schemaVersion": null, because no schema registry was consulted. A DMS update that changes the
primary key prints two events at one position: a delete of the old key, then an insert of the new.
DMS full-load rows print as op "snapshot" at position 000000000000000000000000 (before every change).

stderr: a line that cannot be decoded is reported as "line N: <reason>" and decoding continues.
Control records (create-table, drop-table, column changes) and ignored records (DMS's own
awsdms_ tables, task-level control records) print no event; they are noted as
"note: line N: ..." unless --quiet. Blank lines are skipped.`,
  arguments: [{ name: 'FILE', help: 'the input, JSON lines; - or none: stdin' }],
  options: [
    use(VOCABULARY.sourceId, { detail: 'Stamped on events decoded from DMS records (slot records name their own source).', default: DEFAULT_SOURCE }),
    use(VOCABULARY.key),
    use(VOCABULARY.tableConfig, { detail: 'Its keys, and its mask/exclude rules applied to the printed events (the CDC_TABLE_CONFIG JSON array).' }),
    use(VOCABULARY.sort),
    use(VOCABULARY.quiet),
  ],
  exits: { 0: 'every line decoded', 1: 'a line did not decode (each reported on stderr)' },
  mistaken: { source: '--source is a source database URL (cdc local, doctor, reconcile); cdc decode takes the source id as --source-id' },
};

interface DecodeOptions {
  file: string | null;
  source: string;
  keys: Map<string, string[]>;
  tableConfig: string | null;
  sort: boolean;
  quiet: boolean;
}

function parseKey(spec: string): [string, string[]] {
  const m = /^([^.=\s]+\.[^.=\s]+)=(.+)$/.exec(spec);
  const cols = m ? m[2]!.split(',').map((c) => c.trim()) : [];
  if (!m || cols.some((c) => c === '')) throw new UsageError(`--key expects schema.table=col1,col2, got '${spec}'`);
  return [m[1]!, cols];
}

export function parseDecodeArgs(args: readonly string[]): DecodeOptions {
  const { values, positionals } = parseCommandLine(DECODE, args);
  const sourceId = text(values, 'source-id') ?? DEFAULT_SOURCE;
  if (!isSourceId(sourceId)) throw new UsageError(`--source-id expects a lower-case identifier, got '${sourceId}'`);
  if (positionals.length > 1) throw new UsageError(`one input file at most (got '${positionals.join("' and '")}')`);
  return {
    file: positionals[0] ?? null,
    source: sourceId,
    keys: new Map(texts(values, 'key').map(parseKey)),
    tableConfig: text(values, 'table-config'),
    sort: on(values, 'sort'),
    quiet: on(values, 'quiet'),
  };
}

/** The printed shape: a change event whose schema version is not known (no registry consulted). */
function printable(c: DecodedChange): DecodedChange & { schemaVersion: null } {
  return {
    v: c.v,
    source: c.source,
    table: c.table,
    op: c.op,
    key: c.key,
    after: c.after,
    before: c.before,
    missing: c.missing,
    position: c.position,
    commitTs: c.commitTs,
    txId: c.txId,
    schemaVersion: null,
    capture: c.capture,
    synthetic: c.synthetic,
  };
}

/** A line that is not JSON at all. */
class NotJsonError extends Error {}

function reason(e: unknown): string {
  if (e instanceof NotJsonError) return e.message;
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}

async function run(args: string[], io: CliIo): Promise<number> {
  const o = parseDecodeArgs(args);
  let config: TableConfigIndex | null = null;
  if (o.tableConfig !== null) {
    let text: string;
    try {
      text = await readFile(o.tableConfig, 'utf8');
    } catch (e) {
      throw new UsageError(`cannot read --table-config ${o.tableConfig}: ${(e as Error).message}`);
    }
    try {
      config = new TableConfigIndex(parseTableConfig(text, o.tableConfig));
    } catch (e) {
      throw new UsageError(`--table-config ${reason(e)}`);
    }
  }
  let input: Readable = io.stdin;
  if (o.file !== null && o.file !== '-') {
    const stream = createReadStream(o.file);
    await new Promise<void>((resolve, reject) => {
      stream.once('open', () => resolve());
      stream.once('error', (e) => reject(new UsageError(`cannot read ${o.file}: ${e.message}`)));
    });
    input = stream;
  }

  // Declared keys (--key, then the table config) win; learned ones fill in for the rest.
  const learnedKeys = new Map<string, string[]>();
  const learnedColumns = new Map<string, string[]>();
  const ctx: DecodeContext = {
    source: o.source,
    keyColumns: (table) => o.keys.get(table) ?? config?.keyColumns(table) ?? learnedKeys.get(table) ?? null,
    columns: (table) => learnedColumns.get(table) ?? null,
  };

  const sorted: ReturnType<typeof printable>[] = [];
  let failed = 0;
  let lineNo = 0;
  const note = async (text: string): Promise<void> => {
    if (!o.quiet) await write(io.stderr, `note: line ${lineNo}: ${text}\n`);
  };

  const lines = createInterface({ input, crlfDelay: Infinity });
  for await (const line of lines) {
    lineNo++;
    if (line.trim() === '') continue;
    try {
      let record: unknown;
      try {
        record = parseJsonExact(line);
      } catch (e) {
        throw new NotJsonError(`not JSON: ${(e as Error).message.replace(/^record: not valid JSON: /, '')}`);
      }
      const result = decodeRawRecord(record, ctx);
      if (result.kind === 'ignored') {
        await note(`ignored: ${result.reason}`);
        continue;
      }
      if (result.kind === 'control') {
        if (result.key) learnedKeys.set(result.table, result.key);
        if (result.columns)
          learnedColumns.set(
            result.table,
            result.columns.map((c) => c.name),
          );
        if (result.operation === 'drop-table') {
          learnedKeys.delete(result.table);
          learnedColumns.delete(result.table);
        }
        const detail = [
          result.columns ? `columns ${result.columns.map((c) => `${c.name} ${c.type ?? '?'}${c.nullable ? '' : ' not null'}`).join(', ')}` : null,
          result.key ? `key ${result.key.join(', ')}` : null,
        ].filter((d) => d !== null);
        await note(`control ${result.operation} ${result.table}${detail.length ? ` (${detail.join('; ')})` : ''}`);
        continue;
      }
      const changes = result.changes;
      const table = changes[0]?.table;
      if (table !== undefined && result.keyColumns && !learnedKeys.has(table)) learnedKeys.set(table, result.keyColumns);
      const events = changes.map((c) => printable(config ? applyColumnRulesToChange(c, config.columnRules(c.table)) : c));
      if (o.sort) sorted.push(...events);
      else await write(io.stdout, events.map((e) => `${JSON.stringify(e)}\n`).join(''));
    } catch (e) {
      failed++;
      await write(io.stderr, `line ${lineNo}: ${reason(e)}\n`);
    }
  }
  if (o.sort) {
    sorted.sort((a, b) => comparePositions(a.position, b.position));
    for (const e of sorted) await write(io.stdout, `${JSON.stringify(e)}\n`);
  }
  return failed > 0 ? EXIT_FAILED : EXIT_OK;
}

export const decodeCommand: Command = { spec: DECODE, run };
