/**
 * The poll worker of a `CdcSource` (docs/polling.md): for the tables captured with
 * `CaptureMode.POLL`, a function in the VPC started every minute by a schedule; each invocation
 * runs one pass over the polled tables (paged and paced like the snapshot worker, against the same
 * source budget) and keeps its cursors as control-plane checkpoints. One at a time (reserved
 * concurrency 1). Least privilege: its own checkpoints (read, put), write the raw stream, read the
 * source secrets. Alarm: errors for 15 minutes (the cursors do not move meanwhile).
 */
import { Duration, Size } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { ControlPartition, pollConsumerId } from '../../contracts/control-plane-keys.ts';
import type { CdcFunction } from './cdc-function.ts';
import { startEveryMinute } from './minute-schedule.ts';
import { sourceWorkerFunction, workerErrorsAlarm, type SourceWorkerProps } from './source-worker.ts';

export interface PollWorkerProps extends SourceWorkerProps {
  /** The polled table ids (for the description). */
  readonly polledTables: string[];
}

export function addPollWorker(scope: Construct, props: PollWorkerProps): { fn: lambda.Function; worker: CdcFunction; alarms: cloudwatch.Alarm[] } {
  const worker = sourceWorkerFunction(scope, 'PollWorker', props, {
    handlerName: 'poll-worker',
    description: `Polls ${props.polledTables.length} table(s) of source ${props.sourceId} without log access by their modified-at or version column (${scope.node.path})`,
    serviceName: 'cdc-poll-worker',
    environment: {},
    memorySize: Size.mebibytes(512),
    // The handler stops taking pages 60 s before its time is up.
    timeout: Duration.minutes(5),
  });
  const fn = worker.fn;
  // Only its own cursors (checkpoints of consumer poll-<source>).
  props.controlPlane.grantItems(fn, {
    read: [ControlPartition.checkpoint(pollConsumerId(props.sourceId))],
    put: [ControlPartition.checkpoint(pollConsumerId(props.sourceId))],
  });
  props.rawStream.grantWrite(fn);
  startEveryMinute(scope, 'PollSchedule', fn, `Starts the poll worker of source ${props.sourceId} every minute`);
  const alarms = props.alarmsEnabled
    ? [
        workerErrorsAlarm(scope, 'PollErrorsAlarm', props, {
          fn,
          name: 'poll',
          meanwhile: 'Its polled tables receive no changes meanwhile',
          doc: 'docs/polling.md',
        }),
      ]
    : [];
  return { fn, worker, alarms };
}
