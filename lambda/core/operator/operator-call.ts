/**
 * The operator front door's side of a call (docs/operations.md, docs/deploy.md "Security: operators, who may do what"),
 * pure: which route a request belongs on, and the call an API Gateway proxy event carries — the
 * route it came in on and the caller's IAM identity that API Gateway established by checking
 * the request's SigV4 signature (`AWS_IAM` authorization). Any other event is refused: the
 * operator function does not take an identity from a payload.
 */
import { OPERATOR_API_METHOD, OPERATOR_ROUTES, routeOfRequest } from '../../../contracts/operator-routes.ts';
import type { Refusal } from './operator-decisions.ts';

/** A request to the operator (the CLI's arguments, the operator Lambda's payload). */
export type OperatorRequest =
  | { action: 'status'; source?: string; table?: string }
  | { action: 'pause'; source?: string; table: string; durationMs: number; reason: string }
  | { action: 'resume'; source?: string; table: string; acceptSchema?: boolean }
  | { action: 'resnapshot'; source?: string; table: string; reason?: string }
  | { action: 'audit'; source?: string; table?: string; since?: string }
  | { action: 'rebuild'; source?: string; table: string; sink?: string; from?: string; rehearse?: boolean };

/**
 * One call through a door (built below from the API Gateway event;
 * the `cdc local` door from the OS user): the route it came in on, the caller's identity the
 * door established, and the body.
 */
export interface OperatorCall {
  /** The route's resource path (contracts/operator-routes.ts), e.g. `/read/status`. */
  path: string;
  /** The caller's identity: an IAM ARN on AWS, the OS user locally. */
  caller: string;
  body: unknown;
}

/**
 * Null when `request` belongs on the route `path`, else the refusal: a request sent to another
 * action's route (say a pause to `/read/status`) is refused, since the route is what IAM
 * authorized the caller for.
 */
export function decideRoute(path: string, request: OperatorRequest): Refusal | null {
  const route = OPERATOR_ROUTES.find((r) => r.path === path);
  const want = routeOfRequest(request);
  if (route === want) return null;
  return {
    code: 'ACTION_NOT_ON_THIS_ROUTE',
    reason: route
      ? `a ${want.path.slice(want.path.lastIndexOf('/') + 1)} request came in on ${path}, the route of ${route.actionClass}-class ${route.path.slice(route.path.lastIndexOf('/') + 1)}; it belongs on ${want.path} (${want.actionClass} class)`
      : `${JSON.stringify(path)} is not a route of the operator API; a ${request.action} request belongs on ${want.path}`,
    hint: `send it to ${want.path} with a grant for the ${want.actionClass} class (cdc does; docs/deploy.md "Security: operators, who may do what")`,
  };
}

/** An event that is not an IAM-authorized API Gateway request to an operator route: why. */
export class NotAFrontDoorEventError extends Error {
  readonly code = 'NOT_A_FRONT_DOOR_REQUEST';
  override name = 'NotAFrontDoorEventError';
}

const obj = (v: unknown): Record<string, unknown> | null => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null);

/**
 * The call of an API Gateway REST proxy event: `resource` (the route), `httpMethod`, `body` and
 * `requestContext.identity.userArn` (the IAM caller). Throws `NotAFrontDoorEventError` naming
 * what is missing for anything else, such as a direct Lambda invoke with a self-typed payload.
 */
export function callFromApiGatewayEvent(event: unknown): OperatorCall {
  const e = obj(event);
  const identity = obj(obj(e?.requestContext)?.identity);
  const caller = identity?.userArn;
  if (!e || typeof caller !== 'string' || !caller.startsWith('arn:')) {
    throw new NotAFrontDoorEventError(
      'the operator function serves only IAM-authorized requests of its API (requestContext.identity.userArn missing): call the operator API, not the function (docs/operations.md)',
    );
  }
  if (e.httpMethod !== OPERATOR_API_METHOD)
    throw new NotAFrontDoorEventError(`the operator API takes ${OPERATOR_API_METHOD}, got ${JSON.stringify(e.httpMethod)}`);
  if (typeof e.resource !== 'string') throw new NotAFrontDoorEventError('the event has no resource (the route)');
  let body: unknown;
  try {
    const text = typeof e.body === 'string' ? (e.isBase64Encoded === true ? Buffer.from(e.body, 'base64').toString('utf8') : e.body) : '';
    body = JSON.parse(text);
  } catch {
    throw new NotAFrontDoorEventError('the request body is not JSON: send { "request": { "action": … }, "note"?: … }');
  }
  return { path: e.resource, caller, body };
}
