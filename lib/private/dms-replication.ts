/**
 * The DMS side of a `CdcSource`: the roles DMS assumes, the replication subnet group and
 * instance, the source endpoint (TLS verified by default, docs/deploy.md "TLS to the source"),
 * the Kinesis target endpoint, and the CDC task with its compiled table mappings and settings.
 */
import { createHash } from 'node:crypto';
import { Annotations, Aws } from 'aws-cdk-lib';
import * as dms from 'aws-cdk-lib/aws-dms';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import type { CapturedTable } from '../captured-table.ts';
import { SslMode, type SourceDatabase } from '../source-database.ts';
import { dmsIdentifier } from './physical-name.ts';
import { rdsCaCertificate } from './rds-ca.ts';
import type { SourceNetwork } from './source-network.ts';
import { compileTableMappings } from './table-mappings.ts';
import { taskSettings, type TaskSettingsOptions } from './task-settings.ts';

/** Tag on the replication task naming it (its identifier), for the lifecycle's stop permission. */
export const TASK_TAG = 'cdc-platform:task';

export interface DmsReplicationProps {
  readonly sourceId: string;
  readonly slotName: string;
  readonly captureDdls: boolean;
  readonly database: SourceDatabase;
  readonly network: SourceNetwork;
  readonly rawStream: kinesis.IStream;
  readonly instanceClass: string;
  readonly engineVersion: string;
  readonly storageGiB: number;
  readonly multiAz: boolean;
  /** The key of the instance's storage (`alias/aws/dms` when none was given). */
  readonly encryptionKey?: kms.IKey;
}

export interface DmsReplication {
  readonly targetRole: iam.Role;
  readonly secretsRole: iam.Role;
  readonly instance: dms.CfnReplicationInstance;
  readonly instanceIdentifier: string;
  readonly sourceEndpoint: dms.CfnEndpoint;
  readonly targetEndpoint: dms.CfnEndpoint;
}

/** Roles (`DmsTargetRole`, `DmsSecretsRole`), `SubnetGroup`, `ReplicationInstance`, `SourceEndpoint`, `TargetEndpoint`. */
export function addDmsReplication(scope: Construct, props: DmsReplicationProps): DmsReplication {
  const targetRole = new iam.Role(scope, 'DmsTargetRole', {
    assumedBy: new iam.ServicePrincipal('dms.amazonaws.com'),
    description: `DMS writes the raw stream of ${scope.node.path}`,
  });
  props.rawStream.grantWrite(targetRole);
  props.rawStream.grant(targetRole, 'kinesis:DescribeStream');
  const secretsRole = new iam.Role(scope, 'DmsSecretsRole', {
    // DMS assumes Secrets Manager access roles through its regional principal.
    assumedBy: new iam.CompositePrincipal(new iam.ServicePrincipal(`dms.${Aws.REGION}.amazonaws.com`), new iam.ServicePrincipal('dms.amazonaws.com')),
    description: `DMS reads the source credentials of ${scope.node.path}`,
  });
  props.database.secret.grantRead(secretsRole);

  const subnetGroup = new dms.CfnReplicationSubnetGroup(scope, 'SubnetGroup', {
    replicationSubnetGroupDescription: `CDC source ${props.sourceId} (${scope.node.path})`,
    subnetIds: props.network.subnets.subnetIds,
  });
  const instanceIdentifier = dmsIdentifier(scope, `${props.sourceId}-instance`, 63);
  const instance = new dms.CfnReplicationInstance(scope, 'ReplicationInstance', {
    replicationInstanceIdentifier: instanceIdentifier,
    replicationInstanceClass: props.instanceClass,
    engineVersion: props.engineVersion,
    allocatedStorage: props.storageGiB,
    multiAz: props.multiAz,
    publiclyAccessible: false,
    kmsKeyId: props.encryptionKey?.keyArn,
    replicationSubnetGroupIdentifier: subnetGroup.ref,
    vpcSecurityGroupIds: [props.network.replication.securityGroupId],
  });
  const sourceEndpoint = addSourceEndpoint(scope, props, secretsRole);
  const targetEndpoint = addTargetEndpoint(scope, props.rawStream, targetRole);
  return { targetRole, secretsRole, instance, instanceIdentifier, sourceEndpoint, targetEndpoint };
}

/** The PostgreSQL source endpoint (`test_decoding` slot), with the CA certificate it verifies against. */
function addSourceEndpoint(scope: Construct, props: DmsReplicationProps, secretsRole: iam.Role): dms.CfnEndpoint {
  const database = props.database;
  const certificate =
    database.sslMode !== SslMode.VERIFY_FULL
      ? undefined
      : database.caCertificatePem
        ? new dms.CfnCertificate(scope, 'CaCertificate', { certificatePem: database.caCertificatePem })
        : rdsCaCertificate(scope);
  if (database.sslMode !== SslMode.VERIFY_FULL) {
    Annotations.of(scope).addWarningV2(
      '@cdc-platform/CdcSource:tlsNotVerified',
      `TLS to source ${props.sourceId} is encrypted but the server certificate is not verified (sslMode ${database.sslMode}); use it only for self-signed test servers`,
    );
  }
  const sourceEndpoint = new dms.CfnEndpoint(scope, 'SourceEndpoint', {
    endpointType: 'source',
    engineName: 'postgres',
    databaseName: database.databaseName,
    // TLS verified by default: the certificate chain against the RDS CAs (or the database's own
    // CA PEM) and the host name. REQUIRE (encrypted, unverified) is an explicit opt-out.
    sslMode: database.sslMode,
    certificateArn: certificate?.ref,
    postgreSqlSettings: {
      secretsManagerSecretId: database.secret.secretArn,
      secretsManagerAccessRoleArn: secretsRole.roleArn,
      pluginName: 'test-decoding',
      slotName: props.slotName,
      captureDdls: props.captureDdls,
      // A LOB longer than maxLobSize fails the task instead of being delivered cut short.
      failTasksOnLobTruncation: true,
      // The platform's own heartbeat (every 10 s) keeps the slot moving; DMS's is not needed.
      heartbeatEnable: false,
    },
  });
  sourceEndpoint.node.addDependency(secretsRole);
  return sourceEndpoint;
}

/** The Kinesis target endpoint: the raw stream, with the record details the normalizer decodes. */
function addTargetEndpoint(scope: Construct, rawStream: kinesis.IStream, targetRole: iam.Role): dms.CfnEndpoint {
  const targetEndpoint = new dms.CfnEndpoint(scope, 'TargetEndpoint', {
    endpointType: 'target',
    engineName: 'kinesis',
    kinesisSettings: {
      streamArn: rawStream.streamArn,
      serviceAccessRoleArn: targetRole.roleArn,
      // One JSON document per record, no pretty-printing.
      messageFormat: 'json-unformatted',
      // Commit timestamp, stream position, transaction ids: the normalizer builds positions from them.
      includeTransactionDetails: true,
      // Table definitions and DDL as control records: schema drift comes from the stream.
      includeControlDetails: true,
      includeTableAlterOperations: true,
      // Null columns are present as null, so an absent column means "not delivered".
      includeNullAndEmpty: true,
      partitionIncludeSchemaTable: true,
    },
  });
  targetEndpoint.node.addDependency(targetRole);
  return targetEndpoint;
}

/** The task's configuration as DMS takes it, and its hash (a change re-runs the lifecycle steps). */
export interface TaskConfiguration {
  readonly tableMappingsJson: string;
  readonly settingsJson: string;
  readonly configHash: string;
}

export function taskConfiguration(tables: CapturedTable[], heartbeatSchema: string, settings: TaskSettingsOptions): TaskConfiguration {
  const tableMappingsJson = JSON.stringify(compileTableMappings(tables, heartbeatSchema));
  const settingsJson = JSON.stringify(taskSettings(settings));
  const configHash = createHash('sha256').update(tableMappingsJson).update('\n').update(settingsJson).digest('hex').slice(0, 16);
  return { tableMappingsJson, settingsJson, configHash };
}

/** The CDC task (`ReplicationTask`), starting at the slot's position, tagged for the lifecycle's stop permission. */
export function addReplicationTask(
  scope: Construct,
  props: { replication: DmsReplication; identifier: string; config: TaskConfiguration; startPosition: string },
): dms.CfnReplicationTask {
  return new dms.CfnReplicationTask(scope, 'ReplicationTask', {
    replicationTaskIdentifier: props.identifier,
    migrationType: 'cdc',
    replicationInstanceArn: props.replication.instance.ref,
    sourceEndpointArn: props.replication.sourceEndpoint.ref,
    targetEndpointArn: props.replication.targetEndpoint.ref,
    tableMappings: props.config.tableMappingsJson,
    replicationTaskSettings: props.config.settingsJson,
    // The slot's position when it was created (or found): DMS starts there, natively.
    cdcStartPosition: props.startPosition,
    tags: [{ key: TASK_TAG, value: props.identifier }],
  });
}
