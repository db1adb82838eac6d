/**
 * The example CDK app that `cdk.json` runs: one pipeline per environment, as a `Stage` each (`Dev`,
 * `Prod`; what differs between them is `CdcPipelineProps`): two PostgreSQL sources (masked and
 * excluded columns, a hard-delete table, in prod the rest of a schema captured by pattern with
 * exclusions), one change log, one warehouse sink, one search sink, a reconciler, rebuilds, a
 * dashboard, and every alarm notifying the stage's SNS topic. The DMS service roles, once per
 * account, are a stack of their own (`CdcDmsServiceRoles`).
 *
 * Synthesizes offline with no AWS credentials (`npx cdk synth`). Before deploying, read
 * docs/deploy.md: the secrets named below must exist, the source databases need logical
 * replication, and the databases (at `databaseCidr`, `warehouseCidr`) must admit the functions'
 * and the replication instances' addresses on their ports.
 *
 * Context (`-c key=value`):
 * - `devAccount`, `devRegion`, `prodAccount`, `prodRegion`: where each stage deploys
 *   (default: the account and region of the CLI's credentials);
 * - `prodAlarmTopicArn`: an existing topic for prod's alarms (default: a new topic in the stage);
 * - `createDmsServiceRoles=false` when the accounts already have `dms-vpc-role` and
 *   `dms-cloudwatch-logs-role` (the DMS console creates them on first use).
 */
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { App, Duration, Stack, Stage, Validations, type StackProps, type StageProps } from 'aws-cdk-lib';
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
  PipelineAlarmActions,
  PipelineDashboard,
} from '../lib/index.ts';

/**
 * What differs between environments (dev, prod): the props of a pipeline stage. Everything else
 * (the sources' databases and secrets, the column rules, the sinks) is the same code in every
 * environment, so what reaches production is what ran in dev.
 */
export interface CdcPipelineProps {
  /** The orders source's captured tables. */
  readonly ordersTables: CapturedTable[];
  /** Change-log retention (also the raw streams'). */
  readonly retention: Duration;
  /** How long the change log's S3 archive keeps records. */
  readonly archiveRetention: Duration;
  /** End-to-end lag objective of the warehouse sink (its lag alarms and the dashboard's line). */
  readonly warehouseFreshnessTarget: Duration;
  /** End-to-end lag objective of the search sink. */
  readonly searchFreshnessTarget: Duration;
  /**
   * ARN of an existing SNS topic every alarm of the stage notifies (an on-call integration).
   * @default - a new topic in the stage, `<stack>-Alarms…`; subscribe to it after the deployment
   */
  readonly alarmTopicArn?: string;
  /** DMS replication instance class of each source. */
  readonly replicationInstanceClass: string;
  /** Whether each replication instance has a standby in a second availability zone. */
  readonly multiAz: boolean;
  /** NAT gateways of the VPC (one per availability zone for a NAT that survives a zone). */
  readonly natGateways: number;
  /**
   * Where the source databases and the warehouse are, by address range (a peered VPC or a transit
   * gateway's route): the sources may send the database port there and the sinks the warehouse
   * port (docs/deploy.md, "Network"). Databases whose security groups are in the app are named
   * by `securityGroup` instead, which adds the ingress rule there too.
   */
  readonly databaseCidr: string;
  /** Where the warehouse is, by address range (as `databaseCidr`). */
  readonly warehouseCidr: string;
}

/** The example's environments: what a team would typically set apart between dev and prod. */
export const ENVIRONMENTS: Readonly<Record<'Dev' | 'Prod', CdcPipelineProps>> = {
  Dev: {
    // Only the named tables: a table added in dev flows only once it is named here.
    ordersTables: ordersTables(false),
    retention: Duration.days(1),
    archiveRetention: Duration.days(30),
    warehouseFreshnessTarget: Duration.minutes(10),
    searchFreshnessTarget: Duration.minutes(5),
    replicationInstanceClass: 'dms.t3.medium',
    multiAz: false,
    natGateways: 1,
    databaseCidr: '10.100.0.0/24',
    warehouseCidr: '10.100.1.0/24',
  },
  Prod: {
    ordersTables: ordersTables(true),
    retention: Duration.days(7),
    archiveRetention: Duration.days(395),
    warehouseFreshnessTarget: Duration.minutes(2),
    searchFreshnessTarget: Duration.minutes(1),
    replicationInstanceClass: 'dms.c5.large',
    multiAz: true,
    natGateways: 2,
    databaseCidr: '10.200.0.0/24',
    warehouseCidr: '10.200.1.0/24',
  },
};

/** The orders tables; with `restOfSchema`, every other table of the schema too, by pattern. */
function ordersTables(restOfSchema: boolean): CapturedTable[] {
  return [
    CapturedTable.of('public.customers', { mask: ['email', 'phone'], exclude: ['ssn', 'password_hash'] }),
    CapturedTable.of('public.orders'),
    CapturedTable.of('public.order_items', { deletes: DeleteMode.HARD, primaryKey: ['order_id', 'line_no'] }),
    // Every other table of the schema, including tables created later (docs/onboarding.md):
    // DMS selects them by pattern, with the audit tables and the migration bookkeeping left out.
    ...(restOfSchema ? [CapturedTable.matching('public.*', { exclude: ['public.audit_*', 'public.schema_migrations'] })] : []),
  ];
}

/** The pipeline of one environment in one stack: sources, change log, sinks, reconciler, rebuilds, alarms topic, dashboard. */
export class CdcExampleStack extends Stack {
  /** The topic every alarm of the stage notifies. */
  readonly alarmTopic: sns.ITopic;

  constructor(scope: Construct, id: string, props: CdcPipelineProps & StackProps) {
    super(scope, id, props);
    // The Firehose L2 adds a mapping of Firehose CIDR blocks to every stack that has a delivery
    // stream; it is used only for destinations inside a VPC, which the archive is not.
    Validations.of(this).acknowledge({
      id: 'CloudFormation-Validate::W7001',
      reason: 'the unreferenced mapping is the Firehose CIDR-block table the Firehose L2 always adds',
    });

    const flowLogs = new logs.LogGroup(this, 'VpcFlowLogs', { retention: logs.RetentionDays.ONE_MONTH });
    const vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: props.natGateways,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
      ],
      flowLogs: {
        all: {
          destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs),
          trafficType: ec2.FlowLogTrafficType.ALL,
        },
      },
    });

    // The alarms' actions are given once, for the whole stage (CdcPipelineStage), not per construct.
    this.alarmTopic = props.alarmTopicArn
      ? sns.Topic.fromTopicArn(this, 'Alarms', props.alarmTopicArn)
      : new sns.Topic(this, 'Alarms', {
          displayName: `CDC platform alarms (${this.stackName})`,
          enforceSSL: true,
          masterKey: kms.Alias.fromAliasName(this, 'SnsKey', 'alias/aws/sns'),
        });

    const retention = props.retention;
    const controlPlane = new ControlPlane(this, 'Control', { changeLogRetention: retention });
    // The flow logs on the control plane's key too, whose policy lets CloudWatch Logs use it
    // (docs/deploy.md, "Keys"); the VPC comes first, the key with the control plane.
    (flowLogs.node.defaultChild as logs.CfnLogGroup).kmsKeyId = controlPlane.encryptionKey.keyArn;
    const changeLog = new ChangeLog(this, 'Log', { retention, archiveRetention: props.archiveRetention });
    const sizes = { replicationInstanceClass: props.replicationInstanceClass, multiAz: props.multiAz };
    // The databases are outside this stack's VPC, named by address range: the port is opened to them only.
    const databases = ec2.Peer.ipv4(props.databaseCidr);

    const orders = new CdcSource(this, 'Orders', {
      controlPlane,
      changeLog,
      vpc,
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'OrdersSecret', 'cdc/orders/capture'),
        heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(this, 'OrdersHeartbeatSecret', 'cdc/orders/heartbeat'),
        peer: databases,
      }),
      tables: props.ordersTables,
      // The example's private subnets reach AWS APIs through its NAT gateway: HTTPS only.
      awsApiEgress: AwsApiEgress.natGateway(),
      ...sizes,
    });

    const billing = new CdcSource(this, 'Billing', {
      controlPlane,
      changeLog,
      vpc,
      database: SourceDatabase.postgres({
        databaseName: 'billing',
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'BillingSecret', 'cdc/billing/capture'),
        heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(this, 'BillingHeartbeatSecret', 'cdc/billing/heartbeat'),
        peer: databases,
      }),
      tables: [
        CapturedTable.of('billing.invoices', { mask: ['customer_email'], exclude: ['card_number'], primaryKey: ['invoice_id'] }),
        CapturedTable.of('billing.payments', { primaryKey: ['payment_id'] }),
      ],
      awsApiEgress: AwsApiEgress.natGateway(),
      ...sizes,
    });

    const warehouse = new WarehouseSink(this, 'Warehouse', {
      controlPlane,
      changeLog,
      sources: [orders, billing],
      connection: WarehouseConnection.redshift({
        secret: secretsmanager.Secret.fromSecretNameV2(this, 'WarehouseSecret', 'cdc/warehouse/applier'),
        peer: ec2.Peer.ipv4(props.warehouseCidr),
      }),
      vpc,
      awsApiEgress: AwsApiEgress.natGateway(),
      freshnessTarget: props.warehouseFreshnessTarget,
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
      freshnessTarget: props.searchFreshnessTarget,
    });

    // Reconciliation of both sources against the warehouse, and of the orders source against the
    // search index (docs/reconcile.md): the orders every hour, everything else once a day.
    const reconciler = new Reconciler(this, 'Reconciler', {
      controlPlane,
      sources: [orders, billing],
      sinks: [warehouse, search],
      vpc,
      awsApiEgress: AwsApiEgress.natGateway(),
      tiers: [
        { name: 'hot', every: Duration.hours(1), tables: ['public.orders'] },
        { name: 'daily', every: Duration.days(1) },
      ],
    });

    // Rebuilds of warehouse tables from the archive and the change log (docs/rebuild.md, "On AWS"):
    // `cdc rebuild TABLE --stack Prod-CdcExample`.
    new WarehouseRebuild(this, 'WarehouseRebuild', { controlPlane, changeLog, sink: warehouse, vpc, awsApiEgress: AwsApiEgress.natGateway() });

    // One dashboard for the stage's pipeline (docs/operations.md, "Dashboard"); its alarm panel
    // lists every platform alarm of the stack, the rebuild's above included.
    new PipelineDashboard(this, 'Dashboard', {
      dashboardName: `${this.stackName}-pipeline`,
      sources: [orders, billing],
      warehouseSinks: [warehouse],
      searchSinks: [search],
      reconcilers: [reconciler],
    });
  }
}

/**
 * One environment's pipeline as a CDK `Stage` (`cdk deploy 'Prod/*'`): its stack, and the stage's
 * alarm actions given once to every alarm in it.
 */
export class CdcPipelineStage extends Stage {
  /** The pipeline's stack. */
  readonly pipeline: CdcExampleStack;

  constructor(scope: Construct, id: string, props: CdcPipelineProps & StageProps) {
    super(scope, id, props);
    this.pipeline = new CdcExampleStack(this, 'CdcExample', {
      ...props,
      description: `CDC platform example (${id}): two PostgreSQL sources, a Kinesis change log with an S3 archive, a warehouse sink, a search sink`,
    });
    PipelineAlarmActions.applyTo(this, { actions: [new cloudwatchActions.SnsAction(this.pipeline.alarmTopic)] });
  }
}

/**
 * The roles DMS expects once per account (`DmsServiceRoles`), in their own stack: deployed once
 * per account before the first pipeline there, and left alone by every stage's deployment.
 */
export class DmsServiceRolesStack extends Stack {
  constructor(scope: Construct, id: string, props?: StackProps) {
    super(scope, id, props);
    new DmsServiceRoles(this, 'DmsServiceRoles');
  }
}

/** What `buildExampleApp` built. */
export interface ExampleApp {
  readonly app: App;
  /** The stages, by environment name. */
  readonly stages: Record<'Dev' | 'Prod', CdcPipelineStage>;
  /** The DMS service-role stacks, one per account the stages deploy to (none with `-c createDmsServiceRoles=false`). */
  readonly dmsServiceRoles: DmsServiceRolesStack[];
}

/**
 * Builds the example app (used by `cdk.json` and by the snapshot tests): a Dev and a Prod stage,
 * and the DMS service roles once per account.
 */
export function buildExampleApp(app: App = new App()): ExampleApp {
  const context = (key: string): string | undefined => {
    const value = app.node.tryGetContext(key);
    return value === undefined ? undefined : String(value);
  };
  const envOf = (name: string) => ({ account: context(`${name}Account`), region: context(`${name}Region`) });
  const stages = {
    Dev: new CdcPipelineStage(app, 'Dev', { ...ENVIRONMENTS.Dev, env: envOf('dev') }),
    Prod: new CdcPipelineStage(app, 'Prod', { ...ENVIRONMENTS.Prod, env: envOf('prod'), alarmTopicArn: context('prodAlarmTopicArn') }),
  };
  const dmsServiceRoles: DmsServiceRolesStack[] = [];
  if (context('createDmsServiceRoles') !== 'false') {
    // One stack per account: stages without an account deploy to the CLI's account (one stack).
    const accounts = new Map<string, { account?: string; region?: string }>();
    for (const name of ['dev', 'prod']) {
      const env = envOf(name);
      if (!accounts.has(env.account ?? '')) accounts.set(env.account ?? '', env);
    }
    for (const [account, env] of accounts) {
      dmsServiceRoles.push(
        new DmsServiceRolesStack(app, account ? `CdcDmsServiceRoles-${account}` : 'CdcDmsServiceRoles', {
          env,
          description: 'CDC platform: the DMS service roles (dms-vpc-role, dms-cloudwatch-logs-role), once per account',
        }),
      );
    }
  }
  return { app, stages, dmsServiceRoles };
}
const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href;
if (isMain) {
  buildExampleApp().app.synth();
}
