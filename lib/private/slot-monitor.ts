/**
 * The slot monitor of a `CdcSource` (docs/failures.md): a scheduled function in the source's VPC
 * that reads every replication slot of the source with a read-only monitoring identity and
 * publishes the capture slot's retained WAL and headroom and the WAL pinned by inactive slots of
 * other tools; an alarm before the WAL budget is used up, and a separate one for foreign slots.
 */
import { Duration, Size, SizeRoundingBehavior } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import { ControlPartition, slotReportConsumerId } from '../../contracts/control-plane-keys.ts';
import type { IControlPlane } from '../control-plane.ts';
import { MetricDimension, MetricName } from '../../contracts/metrics.ts';
import { createAlarm } from './alarms.ts';
import type { CdcFunction } from './cdc-function.ts';
import { startEveryMinute } from './minute-schedule.ts';
import { sourceConnectedFunction } from './source-connection.ts';
import type { SourceDatabase } from '../source-database.ts';
import { platformMetric } from './platform-metric.ts';
import { fail } from './validate.ts';

/** Share of the WAL budget retained at which the headroom alarm fires (lambda/core/capture/slot-monitor.ts uses the same). */
export const SLOT_ALARM_FRACTION = 0.8;
/** WAL pinned by inactive foreign slots that is worth a warning: one WAL segment. */
export const FOREIGN_SLOT_WARN_BYTES = 16 * 1024 * 1024;

export interface SlotMonitorProps {
  readonly sourceId: string;
  readonly slotName: string;
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
  /** The source: its read-only monitoring identity (`monitoringSecret`) and its TLS settings. */
  readonly database: SourceDatabase;
  /** The source's WAL budget: headroom is measured against it (and max_slot_wal_keep_size). */
  readonly walBudget: Size;
  readonly alarmsEnabled: boolean;
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /** Where the latest report is kept for `cdc status` (one checkpoint item of the source, put only). */
  readonly controlPlane?: IControlPlane;
}

export class SlotMonitor extends Construct {
  readonly function: CdcFunction;
  readonly alarms: cloudwatch.Alarm[] = [];
  private readonly sourceId: string;

  constructor(scope: Construct, id: string, props: SlotMonitorProps) {
    super(scope, id);
    this.sourceId = props.sourceId;
    const budgetBytes = props.walBudget.toBytes({ rounding: SizeRoundingBehavior.FLOOR });
    if (!(budgetBytes >= 16 * 1024 * 1024)) fail(this, `slotWalBudget must be at least 16 MiB (one WAL segment), got ${budgetBytes} bytes`);
    this.function = sourceConnectedFunction(
      this,
      'Function',
      {
        handlerName: 'slot-monitor',
        description: `Measures the replication slots of source ${props.sourceId}: retained WAL and headroom (${this.node.path})`,
        serviceName: 'cdc-slot-monitor',
        environment: {
          [EnvName.SOURCE_ID]: props.sourceId,
          [EnvName.SLOT_NAME]: props.slotName,
          [EnvName.SLOT_WAL_BUDGET_BYTES]: String(budgetBytes),
          ...(props.controlPlane ? { [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName } : {}),
        },
        memorySize: Size.mebibytes(256),
        timeout: Duration.seconds(30),
        vpc: props.vpc,
        vpcSubnets: props.vpcSubnets,
        securityGroups: [props.securityGroup],
        retryAttempts: 0,
      },
      { database: props.database, secrets: [{ secret: props.database.monitoringSecret, environmentName: EnvName.SOURCE_SECRET_ARN }] },
    );
    // Its latest report, for `cdc status` (lambda/core/capture/slot-monitor.ts slotReportCheckpoint): that one item only.
    props.controlPlane?.grantItems(this.function.fn, { put: [ControlPartition.checkpoint(slotReportConsumerId(props.sourceId))] });
    startEveryMinute(this, 'Schedule', this.function.fn, `Starts the slot monitor of source ${props.sourceId} every minute`);
    if (props.alarmsEnabled) {
      const threshold = budgetBytes - Math.ceil(budgetBytes * SLOT_ALARM_FRACTION);
      this.alarms.push(
        createAlarm(this, 'HeadroomAlarm', {
          nameSuffix: `${props.sourceId}-slot-headroom`,
          description:
            `The replication slot ${props.slotName} of source ${props.sourceId} has less than ${Size.bytes(threshold).toMebibytes({ rounding: SizeRoundingBehavior.FLOOR })} MiB of WAL headroom ` +
            `(${Math.round(SLOT_ALARM_FRACTION * 100)}% of the ${Size.bytes(budgetBytes).toMebibytes({ rounding: SizeRoundingBehavior.FLOOR })} MiB budget retained), or the monitor cannot measure it (${this.node.path}). ` +
            'Past max_slot_wal_keep_size PostgreSQL invalidates the slot and every captured table needs a re-snapshot; without it the source disk fills. ' +
            'Find why the capture is behind (DMS task stopped, CDCLatencySource), see docs/failures.md.',
          metric: this.metricHeadroomBytes(),
          threshold,
          comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 3,
          datapointsToAlarm: 2,
          // No measurement is no reassurance: a monitor that cannot reach the source alarms too.
          treatMissingData: cloudwatch.TreatMissingData.BREACHING,
          actions: props.alarmActions,
        }),
        createAlarm(this, 'ForeignSlotAlarm', {
          nameSuffix: `${props.sourceId}-foreign-inactive-slots`,
          description:
            `Inactive replication slots of other tools pin at least 16 MiB of WAL on source ${props.sourceId} (${this.node.path}). ` +
            "They fill the same disk as the capture slot: drop the abandoned ones (SELECT pg_drop_replication_slot('name')); the monitor's log names them.",
          metric: this.metricForeignInactiveBytes(),
          threshold: FOREIGN_SLOT_WARN_BYTES,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 15,
          datapointsToAlarm: 15,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions: props.alarmActions,
        }),
      );
    }
  }

  /** Bytes of WAL the capture slot retains (`SlotRetainedBytes`); maximum per minute. */
  metricRetainedBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.SLOT_RETAINED_BYTES, { [MetricDimension.SOURCE]: this.sourceId }, { statistic: cloudwatch.Stats.MAXIMUM, ...props });
  }

  /** Bytes left before the WAL budget or max_slot_wal_keep_size (`SlotHeadroomBytes`); minimum per minute. */
  metricHeadroomBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.SLOT_HEADROOM_BYTES, { [MetricDimension.SOURCE]: this.sourceId }, { statistic: cloudwatch.Stats.MINIMUM, ...props });
  }

  /** Bytes pinned by inactive slots of other tools (`SlotForeignInactiveBytes`); maximum per minute. */
  metricForeignInactiveBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(
      this,
      MetricName.SLOT_FOREIGN_INACTIVE_BYTES,
      { [MetricDimension.SOURCE]: this.sourceId },
      { statistic: cloudwatch.Stats.MAXIMUM, ...props },
    );
  }
}
