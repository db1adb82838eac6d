/**
 * One platform Lambda function: the bundled handler, its own log group with retention, a
 * least-privilege role without managed policies, X-Ray tracing, explicit memory and timeout,
 * arm64, and the environment checked against Lambda's 4 KB limit.
 */
import { Duration, RemovalPolicy, Size, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { HANDLER_EXPORT, handlerCode, type HandlerName } from './handler-code.ts';
import { fail } from './validate.ts';

/** Lambda's limit on the total size of a function's environment variables. */
const ENVIRONMENT_LIMIT_BYTES = 4096;

export interface CdcFunctionProps {
  readonly handlerName: HandlerName;
  readonly description: string;
  /** `POWERTOOLS_SERVICE_NAME`. */
  readonly serviceName: string;
  readonly environment: Record<string, string>;
  readonly memorySize: Size;
  readonly timeout: Duration;
  readonly logRetention?: logs.RetentionDays;
  /** Key of the log group (its policy must let CloudWatch Logs use it: lib/private/platform-key.ts). @default CloudWatch Logs' own encryption */
  readonly logEncryptionKey?: kms.IKey;
  readonly vpc?: ec2.IVpc;
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly securityGroups?: ec2.ISecurityGroup[];
  readonly retryAttempts?: number;
}

/** Function + role + log group. `fn` is the escape hatch. */
export class CdcFunction extends Construct {
  readonly fn: lambda.Function;
  readonly role: iam.Role;
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: CdcFunctionProps) {
    super(scope, id);
    const environment: Record<string, string> = {
      ...props.environment,
      [EnvName.POWERTOOLS_SERVICE_NAME]: props.serviceName,
      [EnvName.POWERTOOLS_METRICS_NAMESPACE]: METRICS_NAMESPACE,
    };
    checkEnvironmentSize(this, environment);

    this.logGroup = new logs.LogGroup(this, 'LogGroup', {
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      encryptionKey: props.logEncryptionKey,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    this.role = new iam.Role(this, 'ServiceRole', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `Execution role of ${this.node.path}`,
    });
    // Logs: only this function's own log group (no AWSLambdaBasicExecutionRole).
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [this.logGroup.logGroupArn],
      }),
    );
    if (props.vpc) {
      // The ENI actions of AWSLambdaVPCAccessExecutionRole, inline. EC2 does not support
      // resource-level permissions for Describe*, and Lambda creates the interfaces itself.
      this.role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          actions: [
            'ec2:CreateNetworkInterface',
            'ec2:DescribeNetworkInterfaces',
            'ec2:DescribeSubnets',
            'ec2:DeleteNetworkInterface',
            'ec2:AssignPrivateIpAddresses',
            'ec2:UnassignPrivateIpAddresses',
          ],
          resources: ['*'],
        }),
      );
    }

    this.fn = new lambda.Function(this, 'Resource', {
      description: props.description,
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      handler: HANDLER_EXPORT,
      code: handlerCode(props.handlerName),
      memorySize: props.memorySize.toMebibytes(),
      timeout: props.timeout,
      role: this.role,
      logGroup: this.logGroup,
      tracing: lambda.Tracing.ACTIVE,
      environment,
      vpc: props.vpc,
      vpcSubnets: props.vpc ? props.vpcSubnets : undefined,
      securityGroups: props.vpc ? props.securityGroups : undefined,
      retryAttempts: props.retryAttempts,
    });

    const policy = this.role.node.tryFindChild('DefaultPolicy');
    if (policy) {
      const acks = [
        {
          id: 'AwsSolutions-IAM5[Resource::*]',
          reason: 'X-Ray PutTraceSegments/PutTelemetryRecords and the VPC network-interface actions Lambda needs do not support resource-level permissions',
        },
      ];
      Validations.of(policy).acknowledge(...acks);
    }
  }
}

function checkEnvironmentSize(scope: Construct, environment: Record<string, string>): void {
  const stack = Stack.of(scope);
  let bytes = 0;
  for (const [k, v] of Object.entries(environment)) {
    const resolved = stack.resolve(v);
    // A token's final value is not known here; count its rendered length as an estimate.
    const text = typeof resolved === 'string' ? resolved : JSON.stringify(resolved);
    bytes += Buffer.byteLength(k, 'utf8') + Buffer.byteLength(text, 'utf8');
  }
  if (bytes > ENVIRONMENT_LIMIT_BYTES) {
    const config = environment[EnvName.TABLE_CONFIG];
    const hint = config
      ? ` (${EnvName.TABLE_CONFIG} alone is ${Buffer.byteLength(config, 'utf8')} bytes; capture fewer tables per source or fewer per sink)`
      : '';
    fail(scope, `the lambda environment is about ${bytes} bytes, over lambda's ${ENVIRONMENT_LIMIT_BYTES}-byte limit${hint}`);
  }
}
