/**
 * One invocation of the rebuild worker (docs/rebuild.md, "On AWS"): the event the operator function
 * or the rebuild's state machine sends (`check`, `slice` or `abandon`, lambda/handlers/rebuild-worker.ts),
 * its request checked (bad input names the field), and the rebuild's answer.
 */
import type { RebuildCheckpoint, RebuildRun } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import type { RebuildRefusal } from './rebuild.ts';
import type { RebuildRequest } from './rebuild-ports.ts';
import type { RebuildWorkflow } from './rebuild-workflow.ts';

/** Time a slice leaves itself for the catch-up, swap, diff and record after its last batch. */
export const SLICE_MARGIN_MS = 4 * 60_000;

export type RebuildWorkerEvent =
  | { op: 'check'; request: { source: string; table: string; sink: string; from?: string } }
  | { op: 'slice'; id: string; request: RebuildRequest }
  | { op: 'abandon'; id: string; request: RebuildRequest; error?: unknown };

export type RebuildWorkerResult =
  | { refusal: RebuildRefusal | null }
  | { id: string; done: false; checkpoint: RebuildCheckpoint }
  | { id: string; done: true; outcome: 'done' | 'failed'; run: RebuildRun };

/** Where the invocation reports what it did. */
export interface RebuildInvocationLog {
  info(message: string, detail: Record<string, unknown>): void;
  error(message: string, detail: Record<string, unknown>): void;
}

function text(v: unknown, what: string): string {
  if (typeof v !== 'string' || v === '') throw new CdcError('INVALID_REQUEST', `${what} must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

/** Checks an event's request (the operator function and the state machine send them; bad input names the field). */
export function parseRebuildRequest(v: unknown, sink: string): RebuildRequest {
  if (typeof v !== 'object' || v === null) throw new CdcError('INVALID_REQUEST', `request must be an object, got ${JSON.stringify(v)}`);
  const o = v as Record<string, unknown>;
  const r: RebuildRequest = {
    source: text(o.source, 'request.source'),
    table: text(o.table, 'request.table'),
    sink: text(o.sink, 'request.sink'),
    rehearse: o.rehearse === true,
    actor: typeof o.actor === 'string' && o.actor !== '' ? o.actor : 'operator',
  };
  if (o.from !== undefined && o.from !== null) r.from = text(o.from, 'request.from');
  if (r.sink !== sink) throw new CdcError('INVALID_REQUEST', `request.sink is ${r.sink}, but this rebuild worker serves sink ${sink}`);
  return r;
}

/** Runs one event against the rebuild of the worker's sink; `timeLeftMs` is the invocation's time left. */
export async function runRebuildInvocation(
  rebuilder: Pick<RebuildWorkflow, 'check' | 'slice' | 'abandon'>,
  deps: { sink: string; marginMs?: number; logger?: RebuildInvocationLog },
  event: RebuildWorkerEvent,
  timeLeftMs: () => number = () => Number.POSITIVE_INFINITY,
): Promise<RebuildWorkerResult> {
  const log = deps.logger;
  const op = (event as { op?: unknown })?.op;
  const e = event as { id?: unknown; request?: unknown; error?: unknown };
  if (op === 'check') {
    const r = parseRebuildRequest({ ...(e.request as object), rehearse: false, actor: 'check' }, deps.sink);
    const out = await rebuilder.check(r);
    return { refusal: out.refusal };
  }
  if (op === 'slice') {
    const id = text(e.id, 'id');
    const r = parseRebuildRequest(e.request, deps.sink);
    const out = await rebuilder.slice(r, id, { timeLeftMs, marginMs: deps.marginMs ?? SLICE_MARGIN_MS });
    if (!out.done) {
      log?.info('rebuild slice ended, more to do', { id, table: r.table, events: out.checkpoint.events, slices: out.checkpoint.slices });
      return { id, done: false, checkpoint: out.checkpoint };
    }
    log?.info('rebuild done', { id, table: r.table, mode: out.report.run.mode, durationMs: out.report.run.durationMs, diff: out.report.run.diff });
    return { id, done: true, outcome: 'done', run: out.report.run };
  }
  if (op === 'abandon') {
    const id = text(e.id, 'id');
    const r = parseRebuildRequest(e.request, deps.sink);
    const error = typeof e.error === 'string' ? e.error : JSON.stringify(e.error ?? 'the state machine gave up on a slice');
    const run = await rebuilder.abandon(r, id, error);
    log?.error('rebuild abandoned', { id, table: r.table, error });
    return { id, done: true, outcome: 'failed', run };
  }
  throw new CdcError('INVALID_REQUEST', `op must be check, slice or abandon, got ${JSON.stringify(op)}`);
}
