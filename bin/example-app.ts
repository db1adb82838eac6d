/**
 * The example CDK app that `cdk.json` runs: two PostgreSQL sources (masked and excluded columns,
 * a hard-delete table, the rest of a schema captured by pattern with exclusions), one change log, one warehouse sink, one search sink, alarms to an SNS topic.
 *
 * Synthesizes offline with no AWS credentials (`npx cdk synth`). Before deploying, read
 * docs/deploy.md: the secrets named below must exist, the source databases need logical
 * replication, and their security groups must admit the sources' security groups.
 *
 * Context (`-c key=value`):
 * - `createDmsServiceRoles=false` when the account already has `dms-vpc-role` and
 *   `dms-cloudwatch-logs-role` (the DMS console creates them on first use).
 */
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Duration, Stack, Validations, type StackProps } from 'aws-cdk-lib';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import type { Construct } from 'constructs';
import {
  CapturedTable,
  CdcSource,
  ChangeLog,
  ControlPlane,
  DeleteMode,
  DmsServiceRoles,
  AwsApiEgress,
  SearchSink,
  SourceDatabase,
  WarehouseConnection,
  WarehouseSink,
  Reconciler,
  WarehouseRebuild,
} from '../lib/index.ts';

/** Options of the example stack. */
export interface CdcExampleStackProps extends StackProps {
  /** Create the account-wide DMS roles in this stack. */
  readonly createDmsServiceRoles?: boolean;
}

/** Everything of the example in one stack. */
export class CdcExampleStack extends Stack {
  constructor(scope: Construct, id: string, props: CdcExampleStackProps = {}) {
    super(scope, id, props);
    // The Firehose L2 adds a mapping of Firehose CIDR blocks to every stack that has a delivery
    // stream; it is used only for destinations inside a VPC, which the archive is not.
    Validations.of(this).acknowledge({ id: 'CloudFormation-Validate::W7001', reason: 'the unreferenced mapping is the Firehose CIDR-block table the Firehose L2 always adds' });

    const vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: 1,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
      ],
      flowLogs: {
        all: {
          destination: ec2.FlowLogDestination.toCloudWatchLogs(new logs.LogGroup(this, 'VpcFlowLogs', { retention: logs.RetentionDays.ONE_MONTH })),
          trafficType: ec2.FlowLogTrafficType.ALL,
        },
      },
    });

    const topic = new sns.Topic(this, 'Alarms', {
      displayName: 'CDC platform alarms',
      enforceSSL: true,
      masterKey: kms.Alias.fromAliasName(this, 'SnsKey', 'alias/aws/sns'),
    });
    const alarmActions = [new cloudwatchActions.SnsAction(topic)];

    const retention = Duration.days(7);
    const controlPlane = new ControlPlane(this, 'Control', { changeLogRetention: retention, alarmActions });
    const changeLog = new ChangeLog(this, 'Log', {
      retention,
      archiveRetention: Duration.days(395),
      alarmActions,
    });

    const orders = new CdcSource(this, 'Orders', {
      controlPlane,
      changeLog,
      vpc,
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'OrdersSecret', 'cdc/orders/capture'),
        heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(this, 'OrdersHeartbeatSecret', 'cdc/orders/heartbeat'),
      }),
      tables: [
        CapturedTable.of('public.customers', { mask: ['email', 'phone'], exclude: ['ssn', 'password_hash'] }),
        CapturedTable.of('public.orders'),
        CapturedTable.of('public.order_items', { deletes: DeleteMode.HARD, primaryKey: ['order_id', 'line_no'] }),
        // Every other table of the schema, including tables created later (docs/onboarding.md):
        // DMS selects them by pattern, with the audit tables and the migration bookkeeping left out.
        CapturedTable.matching('public.*', { exclude: ['public.audit_*', 'public.schema_migrations'] }),
      ],
      // The example's private subnets reach AWS APIs through its NAT gateway: HTTPS only.
      awsApiEgress: AwsApiEgress.natGateway(),
      alarmActions,
    });

    const billing = new CdcSource(this, 'Billing', {
      controlPlane,
      changeLog,
      vpc,
      database: SourceDatabase.postgres({
        databaseName: 'billing',
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'BillingSecret', 'cdc/billing/capture'),
        heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(this, 'BillingHeartbeatSecret', 'cdc/billing/heartbeat'),
      }),
      tables: [
        CapturedTable.of('billing.invoices', { mask: ['customer_email'], exclude: ['card_number'], primaryKey: ['invoice_id'] }),
        CapturedTable.of('billing.payments', { primaryKey: ['payment_id'] }),
      ],
      awsApiEgress: AwsApiEgress.natGateway(),
      alarmActions,
    });

    if (props.createDmsServiceRoles ?? true) {
      const roles = new DmsServiceRoles(this, 'DmsServiceRoles');
      orders.node.addDependency(roles);
      billing.node.addDependency(roles);
    }

    const warehouse = new WarehouseSink(this, 'Warehouse', {
      controlPlane,
      changeLog,
      sources: [orders, billing],
      connection: WarehouseConnection.redshift({
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'WarehouseSecret', 'cdc/warehouse/applier'),
      }),
      vpc,
      awsApiEgress: AwsApiEgress.natGateway(),
      freshnessTarget: Duration.minutes(2),
      alarmActions,
    });

    // The search index of the customers and orders (an existing OpenSearch Service domain in the
    // VPC; its access policy must admit the applier's role, see docs/search.md).
    const search = new SearchSink(this, 'Search', {
      controlPlane,
      changeLog,
      sources: [orders],
      domain: opensearch.Domain.fromDomainEndpoint(this, 'SearchDomain', 'https://vpc-cdc-example-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
      tables: [{ table: 'public.customers' }, { table: 'public.orders', deletes: DeleteMode.HARD }],
      vpc,
      awsApiEgress: AwsApiEgress.natGateway(),
      freshnessTarget: Duration.minutes(1),
      alarmActions,
    });

    // Reconciliation of both sources against the warehouse, and of the orders source against the
    // search index (docs/reconcile.md): the orders every hour, everything else once a day.
    new Reconciler(this, 'Reconciler', {
      controlPlane,
      sources: [orders, billing],
      sinks: [warehouse, search],
      vpc,
      awsApiEgress: AwsApiEgress.natGateway(),
      tiers: [
        { name: 'hot', every: Duration.hours(1), tables: ['public.orders'] },
        { name: 'daily', every: Duration.days(1) },
      ],
      alarmActions,
    });

    // Rebuilds of warehouse tables from the archive and the change log (docs/rebuild.md, "On AWS"):
    // `cdc rebuild TABLE --stack CdcExample`.
    new WarehouseRebuild(this, 'WarehouseRebuild', { controlPlane, changeLog, sink: warehouse, vpc, awsApiEgress: AwsApiEgress.natGateway(), alarmActions });
  }
}

/** Builds the example app (used by `cdk.json` and by the snapshot tests). */
export function buildExampleApp(app: App = new App()): { app: App; stack: CdcExampleStack } {
  const createRoles = app.node.tryGetContext('createDmsServiceRoles');
  const stack = new CdcExampleStack(app, 'CdcExample', {
    description: 'CDC platform example: two PostgreSQL sources, a Kinesis change log with an S3 archive, a warehouse sink',
    createDmsServiceRoles: createRoles === undefined ? true : String(createRoles) !== 'false',
  });
  return { app, stack };
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href;
if (isMain) {
  buildExampleApp().app.synth();
}
