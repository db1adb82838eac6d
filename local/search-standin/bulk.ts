/** A bulk request's lines (docs/search.md, "The local stand-in"), and the version a bulk item is checked against. */
import { HttpError, isObj, parseActionLine, type Index, type Obj } from './model.ts';

/** A bulk item: its action, the action's metadata and, but for a delete, its document. */
export interface BulkAction {
  kind: 'index' | 'create' | 'delete';
  meta: Obj;
  source: Obj | null;
}

/**
 * The items of a bulk body (NDJSON: an action line, then a document line but for a delete), one at
 * a time: a malformed line is a 400 when it is reached, after the items before it were applied.
 */
export function* bulkActions(body: string): Generator<BulkAction> {
  const lines = body.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.trim();
    if (line === '') continue;
    let action: Obj;
    try {
      action = parseActionLine(line);
    } catch (e) {
      throw new HttpError(400, 'illegal_argument_exception', `Malformed action/metadata line [${n + 1}]: ${(e as Error).message}`);
    }
    const [kind, meta] = Object.entries(action)[0] ?? [];
    if (!kind || !isObj(meta) || !['index', 'create', 'delete'].includes(kind)) {
      throw new HttpError(
        400,
        'illegal_argument_exception',
        `Malformed action/metadata line [${n + 1}], expected one of index, create, delete (update is not implemented by the stand-in)`,
      );
    }
    let source: Obj | null = null;
    if (kind !== 'delete') {
      const next = lines[++n];
      if (next === undefined || next.trim() === '')
        throw new HttpError(400, 'illegal_argument_exception', `action [${kind}] on line [${n}] has no document line`);
      try {
        const parsed = JSON.parse(next) as unknown;
        if (!isObj(parsed)) throw new Error('not an object');
        source = parsed;
      } catch (e) {
        throw new HttpError(400, 'mapper_parsing_exception', `failed to parse document on line [${n + 1}]: ${(e as Error).message}`);
      }
    }
    yield { kind: kind as BulkAction['kind'], meta, source };
  }
}

/** The current version of a document for version checks: live, or a tombstone inside its horizon. */
export function currentVersion(i: Index, id: string, now: () => number): { version: bigint; live: boolean } | null {
  const d = i.docs.get(id);
  if (d) return { version: d.version, live: true };
  const t = i.tombstones.get(id);
  if (!t) return null;
  if (now() - t.at > i.gcDeletesMs) {
    i.tombstones.delete(id);
    return null;
  }
  return { version: t.version, live: false };
}
