/**
 * The event the warehouse applier keeps for a record the one-pass decode took
 * (`decodeAppendable`; docs/warehouse-apply.md, "The critical path: append"): the fields the
 * append reads filled in, no `missing` columns and no `handover` (a taken text has none), and the
 * key and the images parsed from the text on first read, through today's `JSON.parse` +
 * `validateChangeEvent`, so whatever reads more than the append (the full apply, a duplicate, a
 * held chain) gets the same objects as before. The images are own enumerable properties (getters
 * of the object itself), so spreading, serialising or cloning the event reads them like any
 * other. Pure: no I/O.
 */
import { ENVELOPE_VERSION, validateChangeEvent, type ChangeEvent } from '../shared/event.ts';
import { decodeAppendable, type AppendableEvent } from './appendable-event.ts';

/** The one-pass decode of each lazy event (a copy of one, made by spreading, is not in it: it is read as any event). */
const appendables = new WeakMap<ChangeEvent, AppendableEvent>();

/** The one-pass decode `e` was made from, if it is a lazy event. */
export function appendableOf(e: ChangeEvent): AppendableEvent | undefined {
  return appendables.get(e);
}

/** The event `JSON.parse` + `validateChangeEvent` give for a taken text (today's path). */
export function parsedEvent(a: AppendableEvent): ChangeEvent {
  return validateChangeEvent(JSON.parse(a.text));
}

/** The lazy event of a text the one-pass decode takes, else null (decode it today's way). */
export function lazyEventOf(text: string): ChangeEvent | null {
  const a = decodeAppendable(text);
  if (a === null) return null;
  let full: ChangeEvent | null = null;
  const parsed = (): ChangeEvent => (full ??= parsedEvent(a));
  // Fields in the order `validateChangeEvent` makes them: the same JSON when serialised.
  const e: ChangeEvent = {
    v: ENVELOPE_VERSION,
    source: a.source,
    table: a.table,
    op: a.op,
    get key() {
      return parsed().key;
    },
    get after() {
      return parsed().after;
    },
    get before() {
      return parsed().before;
    },
    missing: [],
    position: a.position,
    commitTs: a.commitTs,
    txId: a.txId,
    schemaVersion: a.schemaVersion,
    capture: a.capture,
    synthetic: a.synthetic,
  };
  appendables.set(e, a);
  return e;
}
