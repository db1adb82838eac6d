/**
 * The operator API on AWS (docs/operations.md): two Lambda functions over the same handler
 * (lambda/handlers/operator.ts), invoked through IAM only — no function URL, no API, no resource
 * policy for any other principal:
 *
 * - the operator function serves every action (status, pause, resume, resnapshot, audit); its
 *   role reads the control table and may write only table items (`SOURCE#…`), sink progress
 *   items (`SINK#…`, the resume's release request) and audit entries (`AUDIT`), by a
 *   `dynamodb:LeadingKeys` condition;
 * - the status function serves status and audit (`CDC_OPERATOR_ACTIONS=status,audit`) and its
 *   role can only read: IAM, not the handler, is what keeps a status-only caller from changing
 *   anything.
 *
 * `grantOperate` grants lambda:InvokeFunction on the first, `grantReadStatus` on the second.
 * Each function has an alarm on its errors.
 */
import { CfnElement, CfnOutput, Duration, Lazy, Size, Stack, Validations } from 'aws-cdk-lib';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import { createAlarm } from './alarms.ts';
import { CdcFunction } from './cdc-function.ts';
import { fail } from './validate.ts';

export interface OperatorFunctionsProps {
  readonly table: dynamodb.ITable;
  readonly changeLogRetention: Duration;
  /** Source id → the longest pause its slot/WAL budget allows. */
  readonly pauseBudgets?: Record<string, Duration>;
  readonly alarmsEnabled: boolean;
  readonly alarmActions?: cloudwatch.IAlarmAction[];
}

/** The actions every operator function needs to read the control table (strongly consistent reads, queries, the sink-progress scan). */
const READ_ACTIONS = ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan', 'dynamodb:DescribeTable'];
/** What an accepted action writes, inside TransactWriteItems (UpdateItem on table and sink items, PutItem of the audit entry). */
const WRITE_ACTIONS = ['dynamodb:UpdateItem', 'dynamodb:PutItem', 'dynamodb:ConditionCheckItem'];
/** The partition keys an operator action may write (lambda/adapters/control-plane-dynamodb.ts item layout); `REBUILD#*`: a sink's rebuild slot (docs/rebuild.md). */
const WRITABLE_LEADING_KEYS = ['SOURCE#*', 'SINK#*', 'AUDIT', 'REBUILD#*'];

export class OperatorFunctions extends Construct {
  readonly operator: CdcFunction;
  readonly status: CdcFunction;
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** Per sink, its rebuild worker and state machine (`addRebuildWorker`), in the operator function's `CDC_REBUILD_WORKERS`. */
  private readonly rebuildWorkers = new Map<string, { worker: lambda.IFunction; stateMachine: sfn.IStateMachine }>();

  constructor(scope: Construct, id: string, props: OperatorFunctionsProps) {
    super(scope, id);
    const retentionMs = props.changeLogRetention.toMilliseconds();
    const budgets: Record<string, number> = {};
    for (const [source, d] of Object.entries(props.pauseBudgets ?? {})) {
      const ms = d.toMilliseconds();
      if (!(ms > 0)) fail(this, `pauseBudgets.${source} must be a positive duration`);
      budgets[source] = ms;
    }
    const environment = (actions: string): Record<string, string> => ({
      ...(actions.includes('rebuild')
        ? {
            [EnvName.REBUILD_WORKERS]: Lazy.uncachedString({
              produce: () => JSON.stringify(Object.fromEntries([...this.rebuildWorkers].sort(([a], [b]) => (a < b ? -1 : 1)).map(([sink, w]) => [sink, { worker: w.worker.functionName, stateMachine: w.stateMachine.stateMachineArn }]))),
            }),
          }
        : {}),
      [EnvName.CONTROL_TABLE]: props.table.tableName,
      [EnvName.CHANGE_LOG_RETENTION_MS]: String(retentionMs),
      [EnvName.OPERATOR_ACTIONS]: actions,
      ...(Object.keys(budgets).length > 0 ? { [EnvName.PAUSE_BUDGETS]: JSON.stringify(budgets) } : {}),
    });
    const common = { handlerName: 'operator' as const, memorySize: Size.mebibytes(256), timeout: Duration.seconds(30) };
    this.operator = new CdcFunction(this, 'Operator', {
      ...common,
      description: 'cdc operator API: status, pause, resume, resnapshot, audit, rebuild (invoked through IAM only)',
      serviceName: 'cdc-operator',
      environment: environment('status,pause,resume,resnapshot,audit,rebuild'),
    });
    this.status = new CdcFunction(this, 'Status', {
      ...common,
      description: 'cdc operator API, read only: status and audit (invoked through IAM only)',
      serviceName: 'cdc-operator-status',
      environment: environment('status,audit'),
    });

    for (const f of [this.operator, this.status]) {
      f.role.addToPrincipalPolicy(new iam.PolicyStatement({ actions: READ_ACTIONS, resources: [props.table.tableArn] }));
      props.table.encryptionKey?.grantDecrypt(f.role);
    }
    this.operator.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: WRITE_ACTIONS,
        resources: [props.table.tableArn],
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': WRITABLE_LEADING_KEYS } },
      }),
    );
    props.table.encryptionKey?.grantEncrypt(this.operator.role);
    const kmsAcks = [
      { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant for writing operator items; scoped to the one key that encrypts the control table' },
      { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant for writing operator items; scoped to the one key that encrypts the control table' },
    ];
    Validations.of(this.operator).acknowledge(...kmsAcks);

    // Where `cdc … --stack NAME` finds the functions (bin/cli/operator.ts).
    new CfnOutput(this, 'OperatorFunctionName', { value: this.operator.fn.functionName, description: 'cdc operator function (every action); cdc status|pause|resume|resnapshot|audit|rebuild --stack' });
    new CfnOutput(this, 'StatusFunctionName', { value: this.status.fn.functionName, description: 'cdc operator function, read only (status, audit)' });

    if (props.alarmsEnabled) {
      for (const [name, f] of [['operator', this.operator], ['status', this.status]] as const) {
        this.alarms.push(
          createAlarm(this, `${name === 'operator' ? 'Operator' : 'Status'}ErrorsAlarm`, {
            nameSuffix: `cdc-operator-${name}-errors`,
            description: `The cdc ${name} function failed (an invocation error, not a refusal of an action): see its log group`,
            metric: f.fn.metricErrors({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(5) }),
            threshold: 0,
            evaluationPeriods: 1,
            datapointsToAlarm: 1,
            treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
            actions: props.alarmActions,
          }),
        );
      }
    }
  }

  /**
   * Lets the operator function start rebuilds of `sinkId` (docs/rebuild.md, "On AWS"): invoke
   * the sink's rebuild worker (the check) and start executions of its state machine.
   */
  addRebuildWorker(sinkId: string, worker: lambda.IFunction, stateMachine: sfn.IStateMachine): void {
    if (this.rebuildWorkers.has(sinkId)) fail(this, `sink ${sinkId} already has a rebuild worker`);
    this.rebuildWorkers.set(sinkId, { worker, stateMachine });
    worker.grantInvoke(this.operator.fn);
    stateMachine.grantStartExecution(this.operator.fn);
    const cfn = worker.node.defaultChild;
    if (cfn instanceof CfnElement) {
      Validations.of(this.operator).acknowledge({
        id: `AwsSolutions-IAM5[Resource::<${Stack.of(cfn).getLogicalId(cfn)}.Arn>:*]`,
        reason: `the invoke grant covers sink ${sinkId}'s rebuild worker and its versions only (the synchronous check before a rebuild starts)`,
      });
    }
  }
}
