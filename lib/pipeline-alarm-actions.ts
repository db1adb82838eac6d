import { Aspects, type IAspect } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type { IConstruct } from 'constructs';
import { notifyAlarmAndOk, platformAlarmOf } from './private/alarms.ts';

/** Properties of `PipelineAlarmActions`. */
export interface PipelineAlarmActionsProps {
  /**
   * Actions for the ALARM and OK transitions of every platform alarm in the scope (an SNS topic
   * per environment, an incident tool): `new cloudwatch_actions.SnsAction(topic)`.
   */
  readonly actions: cloudwatch.IAlarmAction[];
}

/**
 * Gives actions to every alarm the platform's constructs create in a scope (a stage, a stack, an
 * app), once, instead of `alarmActions` on each construct (docs/operations.md, "Alarm actions").
 *
 * An aspect: apply it with `PipelineAlarmActions.applyTo(scope, { actions })` (or
 * `Aspects.of(scope).add(new PipelineAlarmActions({ actions }))`). It adds its actions to the
 * ALARM and OK transitions of each platform alarm in the scope, created before or after it was
 * applied, whose construct was given no `alarmActions`; a construct's own `alarmActions` (an
 * empty list included) replace these for its alarms. Where scopes nest, the nearest
 * `PipelineAlarmActions` wins (a stack's beneath its stage's). Like every CDK aspect, one applied
 * to the app does not reach into its stages: apply it to each stage. Alarms the platform did not
 * create (your own) are left alone.
 */
export class PipelineAlarmActions implements IAspect {
  /** Applies `PipelineAlarmActions` with `props` to `scope`, and returns it. */
  static applyTo(scope: IConstruct, props: PipelineAlarmActionsProps): PipelineAlarmActions {
    const aspect = new PipelineAlarmActions(props);
    Aspects.of(scope).add(aspect);
    return aspect;
  }

  /** The actions given to the alarms. */
  readonly actions: cloudwatch.IAlarmAction[];

  constructor(props: PipelineAlarmActionsProps) {
    if (props === undefined || !Array.isArray(props.actions)) throw new Error('PipelineAlarmActions needs `actions` (a list of alarm actions); it is required');
    this.actions = [...props.actions];
  }

  /** Adds the actions to `node` when it is a platform alarm without its own actions and this is the nearest `PipelineAlarmActions`. */
  visit(node: IConstruct): void {
    if (!(node instanceof cloudwatch.Alarm)) return;
    const mark = platformAlarmOf(node);
    if (mark === undefined || mark.ownActions) return;
    if (nearestPipelineAlarmActions(node) !== this) return;
    for (const action of this.actions) notifyAlarmAndOk(node, action);
  }
}

/** The last `PipelineAlarmActions` applied to the nearest scope (from `node` up) that has one. */
function nearestPipelineAlarmActions(node: IConstruct): PipelineAlarmActions | undefined {
  for (const scope of [...node.node.scopes].reverse()) {
    const here = Aspects.of(scope).all.filter((a): a is PipelineAlarmActions => a instanceof PipelineAlarmActions);
    if (here.length > 0) return here[here.length - 1];
  }
  return undefined;
}
