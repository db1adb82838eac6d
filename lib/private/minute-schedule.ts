/**
 * The schedule of a platform function that runs every minute (the heartbeat writer, the slot
 * monitor, the snapshot and poll workers): an invocation that fails or is late is not retried,
 * since the next minute's replaces it.
 */
import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';

/** The rule `id` that starts `fn` every minute, described by `description`. */
export function startEveryMinute(scope: Construct, id: string, fn: lambda.IFunction, description: string): events.Rule {
  return new events.Rule(scope, id, {
    description,
    schedule: events.Schedule.rate(Duration.minutes(1)),
    targets: [new targets.LambdaFunction(fn, { retryAttempts: 0, maxEventAge: Duration.minutes(1) })],
  });
}
