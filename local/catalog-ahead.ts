/**
 * The catalog read of a streamed batch (`columnTypesOnceVisible`, local/catalog.ts), started
 * before the batch is parsed: the stream knows the batch's transaction ids before its text is
 * parsed, and a batch usually names the tables the last one captured, so the round trip to the
 * source runs while the capture parses instead of after it (docs/performance-log.md §37). The read
 * started ahead is used only where it asked exactly what the batch asks (the same tables, the same
 * transactions); otherwise the batch reads again, as it did before. Either way the types are read
 * once the batch's transactions are visible.
 */
import type pg from 'pg';
import { columnTypesOnceVisible, type CatalogType } from './catalog.ts';

type Types = Map<string, Map<string, CatalogType>>;

export class CatalogAhead {
  private ahead: { tables: ReadonlySet<string>; xids: readonly number[]; types: Promise<Types> } | null = null;
  /** The tables the last batch read the catalog of. */
  private last: ReadonlySet<string> = new Set();

  /** Starts the read for the transactions `xids` and the tables the last batch read (nothing before the first batch). */
  start(client: Pick<pg.ClientBase, 'query'>, xids: readonly number[]): void {
    this.ahead = null;
    if (this.last.size === 0) return;
    const types = columnTypesOnceVisible(client, [...this.last], xids);
    // Awaited by `read` when it is used; a read not used is dropped, its failure with it.
    types.catch(() => undefined);
    this.ahead = { tables: this.last, xids, types };
  }

  /** `columnTypesOnceVisible(client, tables, xids)`: the read started ahead when it asked exactly that, else a new read. */
  read(client: Pick<pg.ClientBase, 'query'>, tables: readonly string[], xids: readonly number[]): Promise<Types> {
    const a = this.ahead;
    this.ahead = null;
    this.last = new Set(tables);
    if (a !== null && sameSet(a.tables, this.last) && sameList(a.xids, xids)) return a.types;
    return columnTypesOnceVisible(client, tables, xids);
  }
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const x of a) if (!b.has(x)) return false;
  return true;
}

function sameList(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
