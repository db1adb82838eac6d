/**
 * The event the warehouse applier keeps for a record the one-pass decode took
 * (`decodeAppendable`; docs/warehouse-apply.md, "The critical path: append"): the fields the
 * append reads filled in, no `missing` columns and no `handover` (a taken text has none), and the
 * key and the images parsed from the text on first read, through today's `JSON.parse` +
 * `validateChangeEvent`, so whatever reads more than the append (the full apply, a duplicate, a
 * held chain) gets the same objects as before. A class, not an object with getters of its own
 * (three closures per event cost more than the pass saves; docs/performance-log.md, "57. The
 * applier's decode in one pass"): its images are on its prototype, so `toJSON` gives the parsed
 * event and a copy of an event is made with `plainEvent` (a spread would leave the images out).
 * Pure: no I/O.
 */
import { ENVELOPE_VERSION, validateChangeEvent, type CaptureMethod, type ChangeEvent, type Row } from '../shared/event.ts';
import { decodeAppendable, type AppendableEvent } from './appendable-event.ts';

/** The event `JSON.parse` + `validateChangeEvent` give for a taken text (today's path). */
export function parsedEvent(a: AppendableEvent): ChangeEvent {
  return validateChangeEvent(JSON.parse(a.text));
}

class LazyEvent implements ChangeEvent {
  readonly v = ENVELOPE_VERSION;
  readonly source: string;
  readonly table: string;
  readonly op: AppendableEvent['op'];
  readonly missing: string[] = [];
  readonly position: string;
  readonly commitTs: string;
  readonly txId: string | null;
  readonly schemaVersion: number;
  readonly capture: CaptureMethod;
  readonly synthetic: boolean;
  #full: ChangeEvent | null = null;

  constructor(readonly decoded: AppendableEvent) {
    this.source = decoded.source;
    this.table = decoded.table;
    this.op = decoded.op;
    this.position = decoded.position;
    this.commitTs = decoded.commitTs;
    this.txId = decoded.txId;
    this.schemaVersion = decoded.schemaVersion;
    this.capture = decoded.capture;
    this.synthetic = decoded.synthetic;
  }

  /** Today's event for the text, parsed once. */
  parsed(): ChangeEvent {
    return (this.#full ??= parsedEvent(this.decoded));
  }

  get key(): Row {
    return this.parsed().key;
  }
  get after(): Row | null {
    return this.parsed().after;
  }
  get before(): Row | null {
    return this.parsed().before;
  }
  toJSON(): ChangeEvent {
    return this.parsed();
  }
}

/** The one-pass decode `e` was made from, if it is a lazy event. */
export function appendableOf(e: ChangeEvent): AppendableEvent | undefined {
  return e instanceof LazyEvent ? e.decoded : undefined;
}

/** `e` as a plain event, to copy (`{ ...plainEvent(e), … }`): a lazy event's parsed one, any other itself. */
export function plainEvent(e: ChangeEvent): ChangeEvent {
  return e instanceof LazyEvent ? e.parsed() : e;
}

/** The lazy event of a text the one-pass decode takes, else null (decode it today's way). */
export function lazyEventOf(text: string): ChangeEvent | null {
  const a = decodeAppendable(text);
  return a === null ? null : new LazyEvent(a);
}
