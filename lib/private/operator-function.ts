/**
 * The operator API on AWS (docs/operations.md, docs/deploy.md "Security: operators, who may do what"): an API Gateway REST
 * API with `AWS_IAM` authorization and one resource per action, grouped by action class
 * (contracts/operator-routes.ts: `/read/…`, `/operate/…`, `/destructive/…`), in front of two
 * Lambda functions over the same handler (lambda/handlers/operator.ts):
 *
 * - the status function serves the read class (`CDC_OPERATOR_ACTIONS=status,audit`) and its
 *   role can only read;
 * - the operator function serves the operate and destructive classes; its role reads the control
 *   table and may write only table items (`SOURCE#…`), sink progress items (`SINK#…`, the
 *   resume's release request), rebuild slots and audit entries (`AUDIT`), by a
 *   `dynamodb:LeadingKeys` condition.
 *
 * IAM decides per route who may call what (`grantRoutes`: `execute-api:Invoke` on the resources
 * of the classes granted); API Gateway passes the caller's IAM ARN to the function, which puts it
 * in the audit entry. Nobody is granted lambda:InvokeFunction on the functions (only API Gateway
 * may invoke them, per method), and the functions refuse any event that is not a request of the
 * API. Access logs record every request with the caller, refused ones included.
 */
import { CfnElement, CfnOutput, Duration, Lazy, Size, Stack, Validations } from 'aws-cdk-lib';
import * as apigateway from 'aws-cdk-lib/aws-apigateway';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import { OPERATOR_API_METHOD, OPERATOR_API_STAGE, OPERATOR_ROUTES, type OperatorActionClass } from '../../contracts/operator-routes.ts';
import { createAlarm } from './alarms.ts';
import { CdcFunction } from './cdc-function.ts';
import { encryptLogGroup } from './platform-key.ts';
import { fail } from './validate.ts';

export interface OperatorFunctionsProps {
  readonly table: dynamodb.ITable;
  /** The key of the functions' and the access log's log groups (the control plane's; its policy lets CloudWatch Logs use it: docs/deploy.md, "Keys"). */
  readonly logKey: kms.IKey;
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
  /** The IAM-authorized front door of both functions. */
  readonly api: apigateway.RestApi;
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** Per sink, its rebuild worker and state machine (`addRebuildWorker`), in the operator function's `CDC_REBUILD_WORKERS`. */
  private readonly rebuildWorkers = new Map<string, { worker: lambda.IFunction; stateMachine: sfn.IStateMachine }>();

  constructor(scope: Construct, id: string, props: OperatorFunctionsProps) {
    super(scope, id);
    const retentionMs = props.changeLogRetention.toMilliseconds();
    const budgets: Record<string, number> = {};
    for (const [sourceId, d] of Object.entries(props.pauseBudgets ?? {})) {
      const ms = d.toMilliseconds();
      if (!(ms > 0)) fail(this, `pauseBudgets.${sourceId} must be a positive duration`);
      budgets[sourceId] = ms;
    }
    const environment = (actions: string): Record<string, string> => ({
      ...(actions.includes('rebuild')
        ? {
            [EnvName.REBUILD_WORKERS]: Lazy.uncachedString({
              produce: () =>
                JSON.stringify(
                  Object.fromEntries(
                    [...this.rebuildWorkers]
                      .sort(([a], [b]) => (a < b ? -1 : 1))
                      .map(([sink, w]) => [sink, { worker: w.worker.functionName, stateMachine: w.stateMachine.stateMachineArn }]),
                  ),
                ),
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
      description:
        'cdc operator API, operate and destructive classes: pause, resume, accept-schema, resnapshot, rebuild (behind the IAM-authorized operator API only)',
      serviceName: 'cdc-operator',
      environment: environment('status,pause,resume,resnapshot,audit,rebuild'),
    });
    this.status = new CdcFunction(this, 'Status', {
      ...common,
      description: 'cdc operator API, read class: status and audit (behind the IAM-authorized operator API only)',
      serviceName: 'cdc-operator-status',
      environment: environment('status,audit'),
    });

    for (const f of [this.operator, this.status]) {
      encryptLogGroup(f.logGroup, props.logKey);
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
      {
        id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]',
        reason: 'CDK key grant for writing operator items; scoped to the one key that encrypts the control table',
      },
      {
        id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]',
        reason: 'CDK key grant for writing operator items; scoped to the one key that encrypts the control table',
      },
    ];
    Validations.of(this.operator).acknowledge(...kmsAcks);

    this.api = this.createApi(props.logKey);
    // Where `cdc … --stack NAME` finds the operator API (bin/cli/operator.ts).
    new CfnOutput(this, 'OperatorApiUrl', {
      value: this.api.url,
      description: 'cdc operator API (IAM-authorized, SigV4): cdc status|pause|resume|resnapshot|audit|rebuild --stack or --url',
    });

    if (props.alarmsEnabled) {
      for (const [name, f] of [
        ['operator', this.operator],
        ['status', this.status],
      ] as const) {
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

  /** The REST API: one POST resource per route, `AWS_IAM` authorization, Lambda proxy integration; access and error logs. */
  private createApi(logKey: kms.IKey): apigateway.RestApi {
    const accessLogs = new logs.LogGroup(this, 'ApiAccessLogs', { retention: logs.RetentionDays.ONE_YEAR });
    encryptLogGroup(accessLogs, logKey);
    const api = new apigateway.RestApi(this, 'Api', {
      description: 'cdc operator API: one IAM-authorized resource per action, grouped by class (read, operate, destructive)',
      endpointConfiguration: { types: [apigateway.EndpointType.REGIONAL] },
      // Logging needs the region's API Gateway CloudWatch role (an account setting; docs/deploy.md "Security: principals").
      cloudWatchRole: true,
      defaultMethodOptions: { authorizationType: apigateway.AuthorizationType.IAM },
      deployOptions: {
        stageName: OPERATOR_API_STAGE,
        loggingLevel: apigateway.MethodLoggingLevel.ERROR,
        dataTraceEnabled: false,
        accessLogDestination: new apigateway.LogGroupLogDestination(accessLogs),
        accessLogFormat: apigateway.AccessLogFormat.custom(
          JSON.stringify({
            requestId: apigateway.AccessLogField.contextRequestId(),
            requestTime: apigateway.AccessLogField.contextRequestTime(),
            caller: apigateway.AccessLogField.contextIdentityUserArn(),
            sourceIp: apigateway.AccessLogField.contextIdentitySourceIp(),
            method: apigateway.AccessLogField.contextHttpMethod(),
            resource: apigateway.AccessLogField.contextResourcePath(),
            status: apigateway.AccessLogField.contextStatus(),
            error: apigateway.AccessLogField.contextErrorMessage(),
          }),
        ),
      },
    });
    for (const route of OPERATOR_ROUTES) {
      const fn = route.actionClass === 'read' ? this.status.fn : this.operator.fn;
      api.root.resourceForPath(route.path).addMethod(OPERATOR_API_METHOD, new apigateway.LambdaIntegration(fn, { allowTestInvoke: false }), {
        authorizationType: apigateway.AuthorizationType.IAM,
      });
    }
    Validations.of(api).acknowledge(
      {
        id: 'AwsSolutions-APIG2',
        reason:
          'the operator function validates every request body and answers 400 naming the field (lambda/core/operator/operator-front-door.ts parseOperatorBody)',
      },
      {
        id: 'AwsSolutions-APIG3',
        reason:
          'every method requires AWS_IAM authorization within the account (no resource policy for other accounts); a WAF adds nothing to SigV4-signed operator calls',
      },
      { id: 'AwsSolutions-COG4', reason: 'operators are IAM principals: the methods use AWS_IAM authorization, per action class, not a Cognito user pool' },
      {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]',
        reason: 'the region-wide API Gateway logging role that access and error logs need; AWS-managed, CloudWatch Logs writes only',
      },
    );
    return api;
  }

  /** `execute-api:Invoke` on the routes of the given action classes (contracts/operator-routes.ts). */
  grantRoutes(grantee: iam.IGrantable, classes: readonly OperatorActionClass[]): iam.Grant {
    return iam.Grant.addToPrincipal({
      grantee,
      actions: ['execute-api:Invoke'],
      resourceArns: OPERATOR_ROUTES.filter((r) => classes.includes(r.actionClass)).map((r) =>
        this.api.arnForExecuteApi(OPERATOR_API_METHOD, r.path, OPERATOR_API_STAGE),
      ),
    });
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
