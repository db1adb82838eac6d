/**
 * Operator Lambda (docs/operations.md): the AWS door of the operator core
 * (lambda/core/operator/operator.ts), behind the operator API (API Gateway, `AWS_IAM` authorization, one
 * resource per action grouped by action class: contracts/operator-routes.ts). It serves only
 * the API's proxy events: the route and the caller's IAM ARN come from the event's request
 * context, which API Gateway fills after checking the SigV4 signature; the body carries the
 * request and an optional note. Any other event (a direct invoke with a self-typed payload) is
 * refused (lambda/core/operator/operator-call.ts). Answers an `OperatorResponse` as the proxy body.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`; `CDC_CHANGE_LOG_RETENTION_MS` (the change
 * log's retention); optional `CDC_PAUSE_BUDGETS` (JSON object source id → ms) and
 * `CDC_OPERATOR_ACTIONS` (the actions this function serves; the status-only function has
 * `status,audit` and a read-only role) and `CDC_REBUILD_WORKERS` (per sink, its rebuild worker and
 * state machine: lambda/adapters/rebuild-aws.ts).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import type { APIGatewayProxyResult, Context } from 'aws-lambda';
import { EnvName } from '../../contracts/env.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { awsRebuilds, lambdaInvoker, parseRebuildWorkers, stepFunctionsStarter } from '../adapters/rebuild-aws.ts';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { SFNClient } from '@aws-sdk/client-sfn';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError } from '../core/shared/errors.ts';
import type { OperatorSettings } from '../core/operator/operator-decisions.ts';
import { callFromApiGatewayEvent, NotAFrontDoorEventError } from '../core/operator/operator-call.ts';
import { controlPlaneSnapshots, Operator, OPERATOR_ACTIONS, type OperatorActionName, type RebuildScheduler } from '../core/operator/operator.ts';
import { serveOperator, type OperatorResponse } from '../core/operator/operator-front-door.ts';
import type { OperatorCall } from '../core/operator/operator-call.ts';

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? 'cdc-operator' });

/** A required setting is missing or malformed. */
export class OperatorConfigurationError extends CdcError {
  constructor(message: string) {
    super('CONFIGURATION', message);
  }
}

/** Reads the operator settings from an environment (throws naming the variable that is wrong). */
export function operatorSettingsFrom(env: NodeJS.ProcessEnv): { settings: OperatorSettings; allowed: OperatorActionName[] } {
  const retention = Number(env[EnvName.CHANGE_LOG_RETENTION_MS]);
  if (!Number.isFinite(retention) || retention <= 0)
    throw new OperatorConfigurationError(
      `${EnvName.CHANGE_LOG_RETENTION_MS} must be a positive number of ms, got ${JSON.stringify(env[EnvName.CHANGE_LOG_RETENTION_MS])}`,
    );
  let pauseBudgetMs: Record<string, number> | undefined;
  const budgets = env[EnvName.PAUSE_BUDGETS];
  if (budgets) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(budgets);
    } catch {
      parsed = null;
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || Object.values(parsed).some((v) => typeof v !== 'number' || !(v > 0))) {
      throw new OperatorConfigurationError(`${EnvName.PAUSE_BUDGETS} must be a JSON object of source id → positive ms, got ${budgets}`);
    }
    pauseBudgetMs = parsed as Record<string, number>;
  }
  const actions = (env[EnvName.OPERATOR_ACTIONS] ?? OPERATOR_ACTIONS.join(','))
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  const unknown = actions.filter((a) => !(OPERATOR_ACTIONS as readonly string[]).includes(a));
  if (unknown.length > 0 || actions.length === 0)
    throw new OperatorConfigurationError(
      `${EnvName.OPERATOR_ACTIONS} must list actions of ${OPERATOR_ACTIONS.join(', ')}, got ${JSON.stringify(env[EnvName.OPERATOR_ACTIONS])}`,
    );
  return { settings: { changeLogRetentionMs: retention, ...(pauseBudgetMs ? { pauseBudgetMs } : {}) }, allowed: actions as OperatorActionName[] };
}

/** The handler over explicit dependencies: one call (route, caller, body) in, the response out (tests and the cdc local door call it in process). */
export function createOperatorHandler(deps: {
  controlPlane: ControlPlane;
  env: NodeJS.ProcessEnv;
  logger?: Pick<Logger, 'info' | 'warn'>;
  rebuilds?: RebuildScheduler;
}): (call: OperatorCall) => Promise<OperatorResponse> {
  const { settings, allowed } = operatorSettingsFrom(deps.env);
  const log = deps.logger ?? logger;
  // A rebuild needs the warehouse and the archive: the cdc local door wires lambda/adapters/rebuilder.ts, the Lambda entry point the sinks' rebuild workers (docs/rebuild.md); without it a rebuild is refused, audited.
  const operator = new Operator({
    controlPlane: deps.controlPlane,
    settings,
    snapshots: controlPlaneSnapshots(deps.controlPlane),
    ...(deps.rebuilds ? { rebuilds: deps.rebuilds } : {}),
  });
  return async (call) => {
    const response = await serveOperator(operator, call, allowed);
    if (response.ok && 'outcome' in response.result)
      log.info('operator action', {
        caller: call.caller,
        route: call.path,
        outcome: response.result.outcome,
        action: response.result.action,
        table: response.result.table,
      });
    else if (!response.ok) log.warn('operator request refused as malformed', { caller: call.caller, route: call.path, error: response.error });
    return response;
  };
}

/** The proxy status of a response: 400 malformed, 403 refused for its route or this function, else 200 (an action's own refusal is an answer, in the body). */
export function statusCodeOf(response: OperatorResponse): number {
  if (!response.ok) return 400;
  const r = response.result;
  if (!Array.isArray(r) && 'outcome' in r && r.outcome === 'refused' && (r.code === 'ACTION_NOT_ON_THIS_ROUTE' || r.code === 'ACTION_NOT_ALLOWED')) return 403;
  return 200;
}

const proxyResult = (statusCode: number, body: OperatorResponse): APIGatewayProxyResult => ({
  statusCode,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});

let built: ((call: OperatorCall) => Promise<OperatorResponse>) | undefined;

/** Lambda entry point: API Gateway REST proxy events of the operator API only. */
export const handler = async (event: unknown, context: Context): Promise<APIGatewayProxyResult> => {
  logger.addContext(context);
  let call: OperatorCall;
  try {
    call = callFromApiGatewayEvent(event);
  } catch (e) {
    if (!(e instanceof NotAFrontDoorEventError)) throw e;
    logger.warn('operator event refused: not an IAM-authorized request of the operator API', { error: e.message });
    return proxyResult(403, { ok: false, error: { code: e.code, message: e.message } });
  }
  if (!built) {
    const table = process.env[EnvName.CONTROL_TABLE];
    if (!table) throw new OperatorConfigurationError(`${EnvName.CONTROL_TABLE} is not set`);
    const controlPlane = new DynamoDbControlPlane(dynamoDbClient(), table);
    // The rebuild of a sink runs in its rebuild state machine, when the stack deploys one (docs/rebuild.md, "On AWS").
    const workers = parseRebuildWorkers(process.env[EnvName.REBUILD_WORKERS]);
    const rebuilds = awsRebuilds({ controlPlane, workers, invoke: lambdaInvoker(new LambdaClient({})), start: stepFunctionsStarter(new SFNClient({})) });
    built = createOperatorHandler({ controlPlane, env: process.env, rebuilds });
  }
  const response = await built(call);
  return proxyResult(statusCodeOf(response), response);
};
