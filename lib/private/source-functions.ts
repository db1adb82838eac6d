/**
 * The functions of a `CdcSource` that DMS does not run: the normalizer (raw stream → change log)
 * and the heartbeat writer (one beat every 10 s). The snapshot, poll and slot-monitor functions
 * have files of their own.
 */
import { Duration, Size } from 'aws-cdk-lib';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import { catalogConsumerId, ControlPartition } from '../../contracts/control-plane-keys.ts';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import type { IChangeLog } from '../change-log.ts';
import type { IControlPlane } from '../control-plane.ts';
import type { SourceDatabase } from '../source-database.ts';
import { CdcFunction } from './cdc-function.ts';
import { startEveryMinute } from './minute-schedule.ts';
import { payloadEnvironment } from './payloads.ts';
import { sourceConnectedFunction } from './source-connection.ts';
import type { SourceNetwork } from './source-network.ts';
import { consumeStream, type StreamConsumer } from './stream-consumer.ts';

/** Heartbeats per writer invocation: one every 10 s across the one-minute schedule. */
const HEARTBEAT_BEATS = 6;

export interface NormalizerProps {
  readonly sourceId: string;
  readonly controlPlane: IControlPlane;
  readonly changeLog: IChangeLog;
  readonly rawStream: kinesis.IStream;
  readonly rawRetention: Duration;
  readonly tableConfig: string;
  readonly tableRules?: string;
  readonly heartbeatSchema: string;
  readonly encryptionKey: kms.IKey;
}

/** The normalizer (`Normalizer`) and its event source mapping on the raw stream. */
export function addNormalizer(scope: Construct, props: NormalizerProps): { normalizer: CdcFunction; consumer: StreamConsumer } {
  const normalizer = new CdcFunction(scope, 'Normalizer', {
    handlerName: 'normalizer',
    description: `Turns DMS records of source ${props.sourceId} into change events (${scope.node.path})`,
    serviceName: ServiceName.NORMALIZER,
    environment: {
      [EnvName.SOURCE_ID]: props.sourceId,
      [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
      [EnvName.CHANGE_LOG_STREAM]: props.changeLog.changeLogStreamName,
      [EnvName.CHANGE_LOG_AGGREGATION]: props.changeLog.recordAggregation ? 'on' : 'off',
      [EnvName.TABLE_CONFIG]: props.tableConfig,
      ...(props.tableRules ? { [EnvName.TABLE_RULES]: props.tableRules } : {}),
      [EnvName.HEARTBEAT_SCHEMA]: props.heartbeatSchema,
      ...payloadEnvironment(props.controlPlane),
      // A table first seen through a type-less DMS record is registered with the catalog types
      // the snapshot worker publishes (docs/schema-drift.md, "First sight of a table").
      [EnvName.CATALOG_TYPES]: 'published',
    },
    memorySize: Size.mebibytes(1024),
    timeout: Duration.minutes(2),
  });
  props.changeLog.grantWrite(normalizer.fn);
  // ListShards: the shard map aggregates are packed by (lambda/core/shared/change-log-aggregates.ts).
  props.changeLog.grant(normalizer.fn, 'kinesis:DescribeStreamSummary', 'kinesis:ListShards');
  props.controlPlane.grantNormalizer(normalizer.fn, props.sourceId);
  props.controlPlane.grantItems(normalizer.fn, { read: [ControlPartition.checkpoint(catalogConsumerId(props.sourceId))] });
  // Its own dead letters' whole records, and its source's events stored out of line (docs/large-records.md).
  props.controlPlane.grantPayloadWrite(normalizer.fn, 'dead-letters/normalizer/');
  props.controlPlane.grantPayloadWrite(normalizer.fn, `claims/${props.sourceId}/`);
  const consumer = consumeStream(normalizer, normalizer.fn, {
    stream: props.rawStream,
    streamRetention: props.rawRetention,
    batchSize: 500,
    maxBatchingWindow: Duration.seconds(0),
    // No retry or age limit: an outage of the control plane or the change log delays the
    // normalizer and never skips raw records (docs/deploy.md, "Outages").
    parallelizationFactor: 1,
    deadLetterQueueEncryptionKey: props.encryptionKey,
  });
  return { normalizer, consumer };
}

/** The heartbeat writer (`HeartbeatWriter`), started every minute (`HeartbeatSchedule`). */
export function addHeartbeatWriter(
  scope: Construct,
  props: { sourceId: string; heartbeatSchema: string; database: SourceDatabase; network: SourceNetwork },
): CdcFunction {
  const heartbeat = sourceConnectedFunction(
    scope,
    'HeartbeatWriter',
    {
      handlerName: 'heartbeat-writer',
      description: `Writes the heartbeat row of source ${props.sourceId} every 10 seconds (${scope.node.path})`,
      serviceName: ServiceName.HEARTBEAT_WRITER,
      environment: {
        [EnvName.SOURCE_ID]: props.sourceId,
        [EnvName.HEARTBEAT_SCHEMA]: props.heartbeatSchema,
        [EnvName.HEARTBEAT_BEATS]: String(HEARTBEAT_BEATS),
      },
      memorySize: Size.mebibytes(256),
      // Six beats 10 s apart take 50 s plus connection time; the next invocation starts a minute later.
      timeout: Duration.seconds(80),
      vpc: props.network.vpc,
      vpcSubnets: props.network.subnetSelection,
      securityGroups: [props.network.heartbeat],
      // A missed minute is replaced by the next one; a late retry would only crowd it.
      retryAttempts: 0,
    },
    { database: props.database, secrets: [{ secret: props.database.heartbeatSecret, environmentName: EnvName.SOURCE_SECRET_ARN }] },
  );
  startEveryMinute(scope, 'HeartbeatSchedule', heartbeat.fn, `Starts the heartbeat writer of source ${props.sourceId} every minute`);
  return heartbeat;
}
