/**
 * A platform function that connects to the source database (docs/deploy.md, "TLS to the source"):
 * the one place that gives a function a source secret, so every function that may read one also
 * gets the source's TLS settings (`CDC_SOURCE_SSL_MODE`, and `CDC_SOURCE_CA_PEM` when the
 * deployment names a CA). The handlers build their connection from that environment
 * (lambda/adapters/source-postgres.ts `sourceConnectionFromEnvironment`) and refuse a secret
 * whose `sslmode` is weaker than the mode set here.
 */
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import type { SourceDatabase } from '../source-database.ts';
import { CdcFunction, type CdcFunctionProps } from './cdc-function.ts';

/** A secret of the source a function connects with, and the variable that names it (none: it arrives another way, e.g. a custom resource's property). */
export interface SourceSecret {
  readonly secret: secretsmanager.ISecret;
  readonly environmentName?: typeof EnvName.SOURCE_SECRET_ARN | typeof EnvName.SNAPSHOT_REPLICA_SECRET_ARN;
}

/** The source's TLS settings as environment variables. */
export function sourceTlsEnvironment(database: SourceDatabase): Record<string, string> {
  return {
    [EnvName.SOURCE_SSL_MODE]: database.sslMode,
    ...(database.caCertificatePem ? { [EnvName.SOURCE_CA_PEM]: database.caCertificatePem } : {}),
  };
}

/**
 * The source's budget as `CDC_SNAPSHOT_BUDGET` for the functions that read its tables in paced
 * pages (docs/snapshot.md, "The budget: the backfill yields"), with the defaults `SnapshotBudget`
 * documents; none when the source sets no budget.
 */
export function snapshotBudgetEnvironment(database: SourceDatabase): Record<string, string> {
  const budget = database.snapshotBudget;
  return budget ? { [EnvName.SNAPSHOT_BUDGET]: JSON.stringify({ writeLatencyPct: budget.writeLatencyPercent ?? 10, cpuPct: budget.cpuPercent ?? 5 }) } : {};
}

/**
 * A `CdcFunction` that connects to the source: its environment gets the secrets' ARNs and the
 * source's TLS settings (within the environment size check), and its role may read the secrets.
 */
export function sourceConnectedFunction(
  scope: Construct,
  id: string,
  props: CdcFunctionProps,
  source: { database: SourceDatabase; secrets: SourceSecret[] },
): CdcFunction {
  const secretEnvironment = Object.fromEntries(source.secrets.filter((s) => s.environmentName).map((s) => [s.environmentName!, s.secret.secretArn]));
  const fn = new CdcFunction(scope, id, { ...props, environment: { ...props.environment, ...secretEnvironment, ...sourceTlsEnvironment(source.database) } });
  for (const s of source.secrets) s.secret.grantRead(fn.fn);
  return fn;
}

/** The capture secret as `CDC_SOURCE_SECRET_ARN`, and the read replica's as `CDC_SNAPSHOT_REPLICA_SECRET_ARN` when there is one (the snapshot and poll workers). */
export function sourceSecrets(database: SourceDatabase): SourceSecret[] {
  return [
    { secret: database.secret, environmentName: EnvName.SOURCE_SECRET_ARN },
    ...(database.readReplicaSecret ? [{ secret: database.readReplicaSecret, environmentName: EnvName.SNAPSHOT_REPLICA_SECRET_ARN }] : []),
  ];
}
