/**
 * Operator Lambda (docs/operations.md): the AWS door of the operator core
 * (lambda/core/operator.ts). Invoked through IAM only (lambda:InvokeFunction; no URL, no public
 * endpoint) with an `OperatorPayload` `{ request, actor }`; answers an `OperatorResponse`.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`; `CDC_CHANGE_LOG_RETENTION_MS` (the change
 * log's retention); optional `CDC_PAUSE_BUDGETS` (JSON object source id → ms) and
 * `CDC_OPERATOR_ACTIONS` (the actions this function serves; the status-only function has
 * `status,audit` and a read-only role) and `CDC_REBUILD_WORKERS` (per sink, its rebuild worker and
 * state machine: lambda/adapters/rebuild-aws.ts).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import { EnvName } from '../../contracts/env.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { awsRebuilds, lambdaInvoker, parseRebuildWorkers, stepFunctionsStarter } from '../adapters/rebuild-aws.ts';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { SFNClient } from '@aws-sdk/client-sfn';
import type { ControlPlane } from '../core/control-plane.ts';
import { CdcError } from '../core/errors.ts';
import type { OperatorSettings } from '../core/operator-decisions.ts';
import { controlPlaneSnapshots, Operator, OPERATOR_ACTIONS, serveOperator, type OperatorActionName, type OperatorResponse, type RebuildScheduler } from '../core/operator.ts';

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
  if (!Number.isFinite(retention) || retention <= 0) throw new OperatorConfigurationError(`${EnvName.CHANGE_LOG_RETENTION_MS} must be a positive number of ms, got ${JSON.stringify(env[EnvName.CHANGE_LOG_RETENTION_MS])}`);
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
  const actions = (env[EnvName.OPERATOR_ACTIONS] ?? OPERATOR_ACTIONS.join(',')).split(',').map((a) => a.trim()).filter(Boolean);
  const unknown = actions.filter((a) => !(OPERATOR_ACTIONS as readonly string[]).includes(a));
  if (unknown.length > 0 || actions.length === 0) throw new OperatorConfigurationError(`${EnvName.OPERATOR_ACTIONS} must list actions of ${OPERATOR_ACTIONS.join(', ')}, got ${JSON.stringify(env[EnvName.OPERATOR_ACTIONS])}`);
  return { settings: { changeLogRetentionMs: retention, ...(pauseBudgetMs ? { pauseBudgetMs } : {}) }, allowed: actions as OperatorActionName[] };
}

/** The handler over explicit dependencies (tests invoke it in process with the CLI's payloads). */
export function createOperatorHandler(deps: { control: ControlPlane; env: NodeJS.ProcessEnv; logger?: Pick<Logger, 'info' | 'warn'>; rebuilds?: RebuildScheduler }): (payload: unknown) => Promise<OperatorResponse> {
  const { settings, allowed } = operatorSettingsFrom(deps.env);
  const log = deps.logger ?? logger;
  // A rebuild needs the warehouse and the archive: the cdc local door wires lambda/adapters/rebuilder.ts, the Lambda entry point the sinks' rebuild workers (docs/rebuild.md); without it a rebuild is refused, audited.
  const operator = new Operator({ control: deps.control, settings, snapshots: controlPlaneSnapshots(deps.control), ...(deps.rebuilds ? { rebuilds: deps.rebuilds } : {}) });
  return async (payload) => {
    const response = await serveOperator(operator, payload, allowed);
    if (response.ok && 'outcome' in response.result) log.info('operator action', { outcome: response.result.outcome, action: response.result.action, table: response.result.table });
    else if (!response.ok) log.warn('operator request refused as malformed', { error: response.error });
    return response;
  };
}

let built: ((payload: unknown) => Promise<OperatorResponse>) | undefined;

/** Lambda entry point. */
export const handler = async (event: unknown, context: Context): Promise<OperatorResponse> => {
  logger.addContext(context);
  if (!built) {
    const table = process.env[EnvName.CONTROL_TABLE];
    if (!table) throw new OperatorConfigurationError(`${EnvName.CONTROL_TABLE} is not set`);
    const control = new DynamoDbControlPlane(dynamoDbClient(), table);
    // The rebuild of a sink runs in its rebuild state machine, when the stack deploys one (docs/rebuild.md, "On AWS").
    const workers = parseRebuildWorkers(process.env[EnvName.REBUILD_WORKERS]);
    const rebuilds = awsRebuilds({ control, workers, invoke: lambdaInvoker(new LambdaClient({})), start: stepFunctionsStarter(new SFNClient({})) });
    built = createOperatorHandler({ control, env: process.env, rebuilds });
  }
  return built(event);
};
