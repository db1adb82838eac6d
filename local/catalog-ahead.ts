/**
 * The catalog read of a streamed batch (`columnTypesOnceVisible`, local/catalog.ts), started
 * before the batch is parsed, or while the batch before it is built where the stream holds the
 * whole batch already: the stream knows a batch's transaction ids before its text is parsed, and a
 * batch usually names the tables the last one captured, so the round trip to the source runs
 * while the capture works instead of after it (docs/performance-log.md §37). The read
 * started ahead is used only where it asked exactly what the batch asks (the same tables, the same
 * transactions); otherwise the batch reads again, as it did before. Either way the types are read
 * once the batch's transactions are visible.
 */
import type pg from 'pg';
import { columnTypesOnceVisible, type CatalogType } from './catalog.ts';

type Types = Map<string, Map<string, CatalogType>>;

export class CatalogAhead {
  /** Reads started ahead: the batch's being parsed, and the next batch's where it is known. */
  private pending: Array<{ tables: ReadonlySet<string>; xids: readonly number[]; types: Promise<Types> }> = [];
  /** The tables the last batch read the catalog of. */
  private last: ReadonlySet<string> = new Set();

  /**
   * Starts the read for the transactions `xids` (the batch about to be parsed) and, where the
   * stream knows them already, `next` (the next batch's), both of the tables the last batch read;
   * a read started for `xids` as the last batch's next is kept. Nothing before the first batch.
   */
  start(client: Pick<pg.ClientBase, 'query'>, xids: readonly number[], next: readonly number[] | null = null): void {
    this.pending = this.pending.filter((p) => sameSet(p.tables, this.last) && sameList(p.xids, xids));
    if (this.last.size === 0) return;
    if (this.pending.length === 0) this.pending.push(this.begin(client, xids));
    if (next !== null && next.length > 0) this.pending.push(this.begin(client, next));
  }

  /** `columnTypesOnceVisible(client, tables, xids)`: a read started ahead when it asked exactly that, else a new read. */
  read(client: Pick<pg.ClientBase, 'query'>, tables: readonly string[], xids: readonly number[]): Promise<Types> {
    this.last = new Set(tables);
    const i = this.pending.findIndex((p) => sameSet(p.tables, this.last) && sameList(p.xids, xids));
    if (i >= 0) return this.pending.splice(i, 1)[0]!.types;
    return columnTypesOnceVisible(client, tables, xids);
  }

  private begin(
    client: Pick<pg.ClientBase, 'query'>,
    xids: readonly number[],
  ): { tables: ReadonlySet<string>; xids: readonly number[]; types: Promise<Types> } {
    const types = columnTypesOnceVisible(client, [...this.last], xids);
    // Awaited by `read` when it is used; a read not used is dropped, its failure with it.
    types.catch(() => undefined);
    return { tables: this.last, xids, types };
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
