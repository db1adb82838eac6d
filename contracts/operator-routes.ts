/**
 * The operator front door's routes (docs/operations.md, docs/deploy.md "Security: operators, who may do what"): one resource
 * per action, grouped by action class, so that an IAM policy on `execute-api:Invoke` for the
 * resources of one class allows that class and nothing else. The construct (lib/), the operator
 * handler (lambda/) and the `cdc` CLI (bin/) share this table: one concept, one name.
 *
 * - `read`: status, audit (change nothing);
 * - `operate`: pause, resume (a hold that the change log's retention bounds);
 * - `destructive`: accept-schema (a resume that continues with a breaking schema version),
 *   resnapshot, rebuild (re-read or rewrite a table in a sink).
 */

export type OperatorActionClass = 'read' | 'operate' | 'destructive';

/** The stage of the operator API; part of every resource ARN a policy names. */
export const OPERATOR_API_STAGE = 'v1';

/** Every route is a POST with a JSON body `{ request, note? }`. */
export const OPERATOR_API_METHOD = 'POST';

export interface OperatorRoute {
  /** The resource path (`/class/name`), also the request's `resource` in the API Gateway event. */
  readonly path: string;
  readonly actionClass: OperatorActionClass;
  /** The operator request's `action` this route carries. */
  readonly action: 'status' | 'audit' | 'pause' | 'resume' | 'resnapshot' | 'rebuild';
  /** For `resume`: whether the route carries `acceptSchema: true` (accept-schema) or not. */
  readonly acceptSchema?: boolean;
}

export const OPERATOR_ROUTES: readonly OperatorRoute[] = [
  { path: '/read/status', actionClass: 'read', action: 'status' },
  { path: '/read/audit', actionClass: 'read', action: 'audit' },
  { path: '/operate/pause', actionClass: 'operate', action: 'pause' },
  { path: '/operate/resume', actionClass: 'operate', action: 'resume', acceptSchema: false },
  { path: '/destructive/accept-schema', actionClass: 'destructive', action: 'resume', acceptSchema: true },
  { path: '/destructive/resnapshot', actionClass: 'destructive', action: 'resnapshot' },
  { path: '/destructive/rebuild', actionClass: 'destructive', action: 'rebuild' },
];

/** The route a request must be sent to: its action (and, for a resume, whether it accepts a schema). */
export function routeOfRequest(request: { action: string; acceptSchema?: boolean }): OperatorRoute {
  const acceptSchema = request.action === 'resume' ? request.acceptSchema === true : undefined;
  const route = OPERATOR_ROUTES.find((r) => r.action === request.action && r.acceptSchema === acceptSchema);
  if (!route) throw new Error(`no operator route carries the action ${JSON.stringify(request.action)}`);
  return route;
}
