/**
 * The operator front door's serving of one call (docs/operations.md): the request body checked and
 * typed (a bad one is an error naming the field), the route and the actions this function serves
 * enforced, then the action run by the operator core (lambda/core/operator/operator.ts).
 */
import { decideRoute, type OperatorCall, type OperatorRequest } from './operator-call.ts';
import { OPERATOR_ACTIONS, type ActionResult, type Operator, type OperatorActionName, type StatusReport } from './operator.ts';
import type { AuditEntry } from '../shared/control-plane.ts';

/** What the operator API answers (the operator Lambda's response; the CLI prints it). */
export type OperatorResponse = { ok: true; result: ActionResult | StatusReport | AuditEntry[] } | { ok: false; error: { code: string; message: string } };

/**
 * The body of a request to the operator front door: the request, and optionally the caller's own
 * note (`cdc --actor`), kept in the audit entry's detail. Who asks is never read from the body.
 */
export interface OperatorBody {
  request: OperatorRequest;
  note?: string;
}

/** A request that does not have the documented shape; the message names the field. */
export class InvalidOperatorRequestError extends Error {
  readonly code = 'INVALID_REQUEST';
  override name = 'InvalidOperatorRequestError';
}

function field(o: Record<string, unknown>, name: string, kind: 'string' | 'number' | 'boolean', required: boolean): unknown {
  const v = o[name];
  if (v === undefined || v === null) {
    if (required) throw new InvalidOperatorRequestError(`request.${name} is required`);
    return undefined;
  }
  if (typeof v !== kind) throw new InvalidOperatorRequestError(`request.${name} must be a ${kind}, got ${JSON.stringify(v)}`);
  if (kind === 'string' && v === '') throw new InvalidOperatorRequestError(`request.${name} must not be empty`);
  return v;
}

/** Checks a request body (from the front door or the CLI) and returns it typed. */
export function parseOperatorBody(value: unknown): OperatorBody {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new InvalidOperatorRequestError(`the body must be an object with request (and optionally note), got ${JSON.stringify(value)}`);
  const p = value as Record<string, unknown>;
  if ('actor' in p)
    throw new InvalidOperatorRequestError(
      'actor is not read from the body: the audit records the identity the door established (the IAM caller, or the OS user locally); put your own text in note',
    );
  const note = p.note;
  if (note !== undefined && (typeof note !== 'string' || note === '' || note.length > 200))
    throw new InvalidOperatorRequestError(`note must be a non-empty string of at most 200 characters, got ${JSON.stringify(note)}`);
  const r = p.request;
  if (typeof r !== 'object' || r === null || Array.isArray(r)) throw new InvalidOperatorRequestError('request must be an object with an action');
  const o = r as Record<string, unknown>;
  const action = o.action;
  if (typeof action !== 'string' || !(OPERATOR_ACTIONS as readonly string[]).includes(action)) {
    throw new InvalidOperatorRequestError(`request.action must be one of ${OPERATOR_ACTIONS.join(', ')}, got ${JSON.stringify(action)}`);
  }
  const sourceId = field(o, 'source', 'string', false) as string | undefined;
  let request: OperatorRequest;
  switch (action as OperatorActionName) {
    case 'status':
      request = { action: 'status', source: sourceId, table: field(o, 'table', 'string', false) as string | undefined };
      break;
    case 'audit': {
      const since = field(o, 'since', 'string', false) as string | undefined;
      if (since !== undefined && Number.isNaN(Date.parse(since)))
        throw new InvalidOperatorRequestError(`request.since must be an ISO-8601 time, got ${JSON.stringify(since)}`);
      request = { action: 'audit', source: sourceId, table: field(o, 'table', 'string', false) as string | undefined, since };
      break;
    }
    case 'pause': {
      const durationMs = field(o, 'durationMs', 'number', true) as number;
      if (!Number.isFinite(durationMs) || durationMs <= 0)
        throw new InvalidOperatorRequestError(`request.durationMs must be a positive number of milliseconds, got ${durationMs}`);
      request = {
        action: 'pause',
        source: sourceId,
        table: field(o, 'table', 'string', true) as string,
        durationMs,
        reason: field(o, 'reason', 'string', true) as string,
      };
      break;
    }
    case 'resume':
      request = {
        action: 'resume',
        source: sourceId,
        table: field(o, 'table', 'string', true) as string,
        acceptSchema: (field(o, 'acceptSchema', 'boolean', false) as boolean | undefined) ?? false,
      };
      break;
    case 'resnapshot':
      request = {
        action: 'resnapshot',
        source: sourceId,
        table: field(o, 'table', 'string', true) as string,
        reason: field(o, 'reason', 'string', false) as string | undefined,
      };
      break;
    case 'rebuild': {
      const sink = field(o, 'sink', 'string', false) as string | undefined;
      const from = field(o, 'from', 'string', false) as string | undefined;
      const rehearse = (field(o, 'rehearse', 'boolean', false) as boolean | undefined) ?? false;
      request = {
        action: 'rebuild',
        source: sourceId,
        table: field(o, 'table', 'string', true) as string,
        ...(sink !== undefined ? { sink } : {}),
        ...(from !== undefined ? { from } : {}),
        rehearse,
      };
      break;
    }
  }
  return { request, ...(note !== undefined ? { note: note as string } : {}) };
}

/**
 * Serves one call: checks the body, refuses a request sent to another action's route (the route
 * is what IAM authorized, so a pause sent to `/read/status` is refused before anything is read)
 * and an action this function does not serve (the status-only function serves the read class),
 * then runs it for the caller, with the body's note. Bad input is an error response naming the
 * field. A refusal here is not audited: nothing reached the control plane (the function's log
 * records it with the caller).
 */
export async function serveOperator(
  operator: Operator,
  call: OperatorCall,
  allowed: readonly OperatorActionName[] = OPERATOR_ACTIONS,
): Promise<OperatorResponse> {
  let parsed: OperatorBody;
  try {
    parsed = parseOperatorBody(call.body);
  } catch (e) {
    if (e instanceof InvalidOperatorRequestError) return { ok: false, error: { code: e.code, message: e.message } };
    throw e;
  }
  const { request } = parsed;
  const target = { action: request.action, source: request.source ?? null, table: 'table' in request ? (request.table ?? null) : null };
  const refusal = decideRoute(call.path, request);
  if (refusal) return { ok: true, result: { outcome: 'refused', ...target, ...refusal } };
  if (!allowed.includes(request.action)) {
    return {
      ok: true,
      result: {
        outcome: 'refused',
        ...target,
        code: 'ACTION_NOT_ALLOWED',
        reason: `this operator function serves only ${allowed.join(', ')}`,
        hint: 'send the request to its own route of the operator API (cdc does)',
      },
    };
  }
  return { ok: true, result: await operator.run(request, { id: call.caller, ...(parsed.note !== undefined ? { note: parsed.note } : {}) }) };
}
