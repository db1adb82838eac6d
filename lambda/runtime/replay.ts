/**
 * The resume replay as both sink appliers' handlers run it (docs/operations.md, "How a resume
 * replays"): the schedule's `{ cdcReplay: true }` event, and the replay workflow
 * (lambda/core/sink/held-range-replay.ts) wired to the control table and the change log the
 * environment names.
 */
import { EnvName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { createHeldRangeReplayer, type ReplayDeps, type ReplayOutcome } from '../core/sink/held-range-replay.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { readChangeLog } from '../adapters/change-log-reader.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';

export type { ReplayOutcome } from '../core/sink/held-range-replay.ts';

/** The scheduled event (lib/warehouse-sink.ts) on which the function runs the resume replay of released holds. */
export interface ReplayEvent {
  cdcReplay: true;
}

export const isReplayEvent = (e: unknown): e is ReplayEvent => typeof e === 'object' && e !== null && (e as { cdcReplay?: unknown }).cdcReplay === true;

let replayKinesis: ReturnType<typeof kinesisClient> | undefined;

/**
 * The resume replay of a sink's released holds on AWS (the `{ cdcReplay: true }` schedule of
 * WarehouseSink and SearchSink): the control table, sink id and change log named in the
 * environment, applied through the sink's own applier.
 */
export async function replayFromEnvironment(applier: ReplayDeps['applier'], log: NonNullable<ReplayDeps['log']>): Promise<ReplayOutcome[]> {
  const stream = process.env[EnvName.CHANGE_LOG_STREAM];
  if (!stream) throw new ConfigurationError(`${EnvName.CHANGE_LOG_STREAM} is not set (the resume replay reads the change log)`);
  const kinesis = (replayKinesis ??= kinesisClient());
  const replayer = createHeldRangeReplayer({
    controlPlane: new DynamoDbControlPlane(dynamoDbClient(), process.env[EnvName.CONTROL_TABLE]!),
    sinkId: process.env[EnvName.SINK_ID]!,
    applier,
    readLog: (starts) => readChangeLog(kinesis, stream, { starts }),
    log,
  });
  return replayer.replayPending();
}
