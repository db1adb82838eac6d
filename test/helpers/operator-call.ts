/**
 * A call of the operator handler as a door makes it (lambda/core/operator/operator.ts `OperatorCall`):
 * the request on its own route, for a caller the door established.
 */
import { routeOfRequest } from '../../contracts/operator-routes.ts';
import type { OperatorCall, OperatorRequest } from '../../lambda/core/operator/operator-call.ts';

export function operatorCall(caller: string, request: OperatorRequest, note?: string): OperatorCall {
  return { path: routeOfRequest(request).path, caller, body: { request, ...(note !== undefined ? { note } : {}) } };
}
