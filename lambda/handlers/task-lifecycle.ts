/**
 * The DMS replication task's lifecycle custom resources (`Custom::CdcReplicationSlot`,
 * `Custom::CdcColumnRules`, `Custom::CdcReplicationTaskStarter`; what each does is the workflow's,
 * lambda/core/capture/task-lifecycle.ts). This handler wires it to DMS, the source database and
 * the control plane, and always answers CloudFormation's pre-signed `ResponseURL`.
 */
import { DatabaseMigrationServiceClient } from '@aws-sdk/client-database-migration-service';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { CloudFormationCustomResourceEvent, Context } from 'aws-lambda';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { responseBody, runLifecycle, type LifecycleDeps, type SlotPort } from '../core/capture/task-lifecycle.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import { AwsDms, PgSlots, sendResponse } from '../adapters/task-lifecycle-aws.ts';

/** Runs the request and always answers CloudFormation. */
export function createTaskLifecycleHandler(deps: LifecycleDeps): (event: CloudFormationCustomResourceEvent) => Promise<void> {
  return async (event) => {
    let body: string;
    try {
      const result = await runLifecycle(event, deps);
      body = responseBody(event, { ok: true, result });
      deps.log?.('lifecycle step done', { request: event.RequestType, resource: event.LogicalResourceId, physicalResourceId: result.physicalResourceId });
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      deps.log?.('lifecycle step failed', { request: event.RequestType, resource: event.LogicalResourceId, reason });
      body = responseBody(event, { ok: false, reason });
    }
    await sendResponse(event.ResponseURL, body);
  };
}

// Module scope: created once per execution environment.
const dmsClient = new DatabaseMigrationServiceClient({});
const secretsClient = new SecretsManagerClient({});

async function openSlotsFromSecret(secretArn: string, databaseName: string): Promise<SlotPort> {
  // TLS from the environment the construct sets on every function given the source secret
  // (docs/deploy.md, "TLS to the source"); the custom resource's `Ssl` only makes a change of the
  // mode run the slot step again.
  const config = await sourceConnectionFromEnvironment({ secrets: secretsClient, applicationName: ServiceName.DMS_TASK_LIFECYCLE, secretArn });
  // The slot belongs to the captured database, whatever database the secret names.
  return PgSlots.connect({ ...config, database: databaseName });
}

/** Lambda entry point (a CloudFormation custom resource provider). */
const dynamodb = dynamoDbClient();

export const handler = async (event: CloudFormationCustomResourceEvent, context: Context): Promise<void> => {
  const run = createTaskLifecycleHandler({
    dms: new AwsDms(dmsClient),
    openSlots: openSlotsFromSecret,
    sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
    remainingMs: () => context.getRemainingTimeInMillis(),
    log: (message, fields) => console.log(JSON.stringify({ level: 'INFO', message, ...fields })),
    ...(process.env[EnvName.CONTROL_TABLE] ? { controlPlane: new DynamoDbControlPlane(dynamodb, process.env[EnvName.CONTROL_TABLE]!) } : {}),
  });
  await run(event);
};
