/**
 * `cdc decode [FILE]`: raw capture records (DMS or slot format, detected per line) in, canonical
 * change events out, both as JSON lines. See `HELP` for the contract.
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
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command } from './command.ts';

export const DEFAULT_SOURCE = 'cli';

const HELP = `Usage: cdc decode [FILE] [options]

Reads raw capture records as JSON lines from FILE (or stdin) and prints the canonical change
events they stand for as JSON lines on stdout. Each line may be a DMS Kinesis record or a
slot-capture record ("format": "cdc-slot/1"); the format is detected per line.

Options:
  --source-id ID              source id stamped on events decoded from DMS records
                              (slot records name their own source) [default: ${DEFAULT_SOURCE}]
  --key schema.table=c1,c2    primary-key columns of a table (repeatable). DMS records do not
                              name the key; without --key it is learned from create-table
                              control records and pk-only before images seen earlier in the input
  --table-config FILE         captured-table settings (the CDC_TABLE_CONFIG JSON array): keys,
                              and mask/exclude rules applied to the printed events
  --sort                      print all events at the end, ordered by position (stable)
  --quiet                     do not print notes on stderr
  -h, --help                  this text

Output: one event per line, in the change event's shape (v, source, table, op, key, after,
before, missing, position, commitTs, txId, schemaVersion, capture, synthetic) with
"schemaVersion": null, because no schema registry was consulted. A DMS update that changes the
primary key prints two events at one position: a delete of the old key, then an insert of the new.
DMS full-load rows print as op "snapshot" at position 000000000000000000000000 (before every change).

stderr: a line that cannot be decoded is reported as "line N: <reason>" and decoding continues.
Control records (create-table, drop-table, column changes) and ignored records (DMS's own
awsdms_ tables, task-level control records) print no event; they are noted as
"note: line N: ..." unless --quiet. Blank lines are skipped.

Exit code: 0 when every line decoded, 1 when any line failed, 2 for a usage error.
`;

interface DecodeOptions {
  file: string | null;
  source: string;
  keys: Map<string, string[]>;
  tableConfig: string | null;
  sort: boolean;
  quiet: boolean;
  help: boolean;
}

function parseKey(spec: string): [string, string[]] {
  const m = /^([^.=\s]+\.[^.=\s]+)=(.+)$/.exec(spec);
  const cols = m ? m[2]!.split(',').map((c) => c.trim()) : [];
  if (!m || cols.some((c) => c === '')) throw new UsageError(`--key expects schema.table=col1,col2, got '${spec}'`);
  return [m[1]!, cols];
}

export function parseDecodeArgs(args: readonly string[]): DecodeOptions {
  const o: DecodeOptions = { file: null, source: DEFAULT_SOURCE, keys: new Map(), tableConfig: null, sort: false, quiet: false, help: false };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const value = (): string => {
      const v = args[++i];
      if (v === undefined) throw new UsageError(`${a} needs a value`);
      return v;
    };
    switch (a) {
      case '-h':
      case '--help':
        o.help = true;
        break;
      // `--source-id`, as in `cdc local`, where `--source` is the source database URL.
      case '--source-id':
        o.source = value();
        if (!isSourceId(o.source)) throw new UsageError(`--source-id expects a lower-case identifier, got '${o.source}'`);
        break;
      case '--source':
        throw new UsageError("--source is cdc local's source database URL; cdc decode takes the source id as --source-id");
      case '--key': {
        const [table, cols] = parseKey(value());
        o.keys.set(table, cols);
        break;
      }
      case '--table-config':
        o.tableConfig = value();
        break;
      case '--sort':
        o.sort = true;
        break;
      case '--quiet':
        o.quiet = true;
        break;
      default:
        if (a.startsWith('-') && a !== '-') throw new UsageError(`unknown option '${a}'`);
        if (o.file !== null) throw new UsageError(`one input file at most (got '${o.file}' and '${a}')`);
        o.file = a;
    }
  }
  return o;
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
  if (o.help) {
    await write(io.stdout, HELP);
    return EXIT_OK;
  }
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
        if (result.columns) learnedColumns.set(result.table, result.columns.map((c) => c.name));
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

export const decodeCommand: Command = {
  name: 'decode',
  summary: 'decode raw capture records (DMS or slot, JSON lines) into canonical change events',
  run,
};
