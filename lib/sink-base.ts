import type { Duration } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { AwsApiEgress } from './aws-api-egress.ts';
import type { ICdcSource } from './cdc-source.ts';
import type { IChangeLog } from './change-log.ts';
import type { IControlPlane } from './control-plane.ts';

/**
 * What every sink that applies the change log with its own applier function takes: the sources
 * and change log it reads, where its progress lives, its stream settings and its alarms
 * (`WarehouseSinkProps`, `SearchSinkProps`).
 */
export interface ChangeLogSinkProps {
  /** The control plane holding this sink's offsets, holds and table states. */
  readonly controlPlane: IControlPlane;
  /** The change log the sink reads. */
  readonly changeLog: IChangeLog;
  /** The sources whose tables this sink serves; each must publish to `changeLog`. */
  readonly sources: ICdcSource[];
  /**
   * How the applier reaches AWS APIs over HTTPS (in a VPC); its security group allows nothing
   * else outbound but the port of what it writes to.
   * @default AwsApiEgress.vpcEndpoints() (HTTPS to the VPC's CIDR block only)
   */
  readonly awsApiEgress?: AwsApiEgress;
  /**
   * Subnets of the applier; they need a route to what it writes to and to the AWS APIs it calls.
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * The sink id: a lower-case identifier, unique per change log.
   * @default - derived from the construct id (`OrdersWarehouse` → `orders_warehouse`)
   */
  readonly sinkId?: string;
  /**
   * The end-to-end lag objective: source commit to the sink's write, measured on heartbeats.
   * The lag alarm of each source fires when five consecutive minutes exceed it.
   * @default Duration.minutes(5)
   */
  readonly freshnessTarget?: Duration;
  /**
   * Records per applier invocation (1 to 10,000).
   * @default 1000; 10,000 for a `WarehouseSink` with `redshiftStaging` (a batch waits for a load, so a
   * shard carries one batch per load)
   */
  readonly batchSize?: number;
  /**
   * Retries of a failing batch before its records are given up to the dead-letter queue (0 to
   * 10,000, or -1 for no limit). A limit turns an outage longer than the retries into skipped
   * writes: the applier dead-letters bad input itself and fails only on infrastructure errors
   * (see docs/deploy.md, "Outages").
   * @default -1 (no limit: an outage delays, it never skips)
   */
  readonly retryAttempts?: number;
  /**
   * Age after which a record that still fails is given up to the dead-letter queue (60 s to 7
   * days, shorter than the change-log retention). Like `retryAttempts`, a limit lets an outage
   * skip records.
   * @default - no limit (an outage delays, it never skips)
   */
  readonly maxRecordAge?: Duration;
  /**
   * Concurrent batches per shard (1 to 10); order per key is kept either way, and so is the
   * resume's no-skip guarantee. Above 1, the lanes of one shard may lag one another, so the resume
   * replay of a table the sink held replays each held shard from its trim horizon rather than from
   * its first held event, re-applying (as duplicates) the table's events the change log retains on
   * it (docs/operations.md, "How a resume replays").
   * @default 1
   */
  readonly parallelizationFactor?: number;
  /**
   * Whether to create the recommended alarms.
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarms' ALARM and OK transitions.
   * @default - no actions
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /**
   * Applier iterator age above which its alarm fires: the signal that the sink is stuck.
   * @default - a quarter of the change-log retention (half of `maxRecordAge` when that is set)
   */
  readonly alarmIteratorAgeThreshold?: Duration;
}
