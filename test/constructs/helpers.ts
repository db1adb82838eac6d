/**
 * Shared fixtures of the construct tests: an app without the built-in CloudFormation validation
 * (slow; the example-app test runs it once), a stack with a VPC, secrets, a control plane and a
 * change log, and template helpers.
 */
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { CapturedTable, CdcSource, ChangeLog, ControlPlane, SourceDatabase, type CdcSourceProps } from '../../lib/index.ts';

/**
 * Where the fixtures' source database and warehouse are, by address range (`SourceDatabase.postgres`'s
 * and `WarehouseConnection`'s `peer`; docs/deploy.md, "Network"): the constructs fail synth when
 * nothing names a database they connect to.
 */
export const DATABASE_PEER = ec2.Peer.ipv4('10.0.64.0/24');
export const WAREHOUSE_PEER = ec2.Peer.ipv4('10.0.65.0/24');

export function newApp(): App {
  return new App({ builtinCloudFormationValidation: false });
}

export interface Fixture {
  app: App;
  stack: Stack;
  vpc: ec2.IVpc;
  controlPlane: ControlPlane;
  log: ChangeLog;
  sourceSecret: secretsmanager.ISecret;
  heartbeatSecret: secretsmanager.ISecret;
  warehouseSecret: secretsmanager.ISecret;
}

export function fixture(): Fixture {
  const app = newApp();
  const stack = new Stack(app, 'Test');
  const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1 });
  addApiEndpoints(vpc);
  const controlPlane = new ControlPlane(stack, 'Control');
  const log = new ChangeLog(stack, 'Log');
  const sourceSecret = secretsmanager.Secret.fromSecretNameV2(stack, 'SourceSecret', 'source');
  const heartbeatSecret = secretsmanager.Secret.fromSecretNameV2(stack, 'HeartbeatSecret', 'heartbeat');
  const warehouseSecret = secretsmanager.Secret.fromSecretNameV2(stack, 'WarehouseSecret', 'warehouse');
  return { app, stack, vpc, controlPlane, log, sourceSecret, heartbeatSecret, warehouseSecret };
}

/**
 * The interface endpoints the constructs' default egress (`AwsApiEgress.vpcEndpoints()`, HTTPS to
 * the VPC's CIDR block) needs in a VPC created in the app (docs/deploy.md, "Network"), behind one
 * group that admits HTTPS from the VPC's CIDR (ec2.Vpc's default, 10.0.0.0/16) and sends nothing.
 */
export function addApiEndpoints(vpc: ec2.Vpc): void {
  const securityGroup = new ec2.SecurityGroup(vpc, 'ApiEndpoints', { vpc, description: 'Interface endpoints of the AWS APIs', allowAllOutbound: false });
  securityGroup.addIngressRule(ec2.Peer.ipv4('10.0.0.0/16'), ec2.Port.tcp(443), 'HTTPS from the VPC');
  const s = ec2.InterfaceVpcEndpointAwsService;
  const services = {
    Kinesis: s.KINESIS_STREAMS,
    SecretsManager: s.SECRETS_MANAGER,
    Dms: s.DATABASE_MIGRATION_SERVICE,
    DynamoDb: s.DYNAMODB,
    S3: s.S3,
    CloudWatch: s.CLOUDWATCH_MONITORING,
  };
  for (const [id, service] of Object.entries(services)) vpc.addInterfaceEndpoint(id, { service, securityGroups: [securityGroup], open: false });
}

/** A `CdcSource` named `Orders` in the fixture with sensible tables, overridable. */
export function ordersSource(f: Fixture, overrides: Partial<CdcSourceProps> = {}, id = 'Orders'): CdcSource {
  return new CdcSource(f.stack, id, {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    vpc: f.vpc,
    database: SourceDatabase.postgres({ databaseName: 'orders', secret: f.sourceSecret, heartbeatSecret: f.heartbeatSecret, peer: DATABASE_PEER }),
    tables: [CapturedTable.of('public.customers', { mask: ['email'], exclude: ['ssn'] }), CapturedTable.of('public.orders')],
    ...overrides,
  });
}

/** Resources of one type as `[logicalId, resource]` pairs. */
export function resourcesOf(template: Template, type: string): Array<[string, { Properties: Record<string, unknown> } & Record<string, unknown>]> {
  return Object.entries(template.findResources(type)) as Array<[string, { Properties: Record<string, unknown> } & Record<string, unknown>]>;
}

/** The single resource of a type whose logical id starts with `prefix`. */
export function onlyResource(template: Template, type: string, prefix = ''): { Properties: Record<string, unknown> } & Record<string, unknown> {
  const found = resourcesOf(template, type).filter(([id]) => id.startsWith(prefix));
  if (found.length !== 1) throw new Error(`expected one ${type} with prefix ${prefix}, found ${found.map(([id]) => id).join(', ') || 'none'}`);
  return found[0]![1];
}

/** Every policy document in the template: identity policies, inline role policies, resource policies, key policies. */
export function policyDocuments(template: Template): Array<{ where: string; doc: { Statement: Array<Record<string, unknown>> } }> {
  const docs: Array<{ where: string; doc: { Statement: Array<Record<string, unknown>> } }> = [];
  const resources = template.toJSON().Resources as Record<string, { Type: string; Properties?: Record<string, unknown> }>;
  for (const [id, r] of Object.entries(resources)) {
    const p = r.Properties ?? {};
    if (r.Type === 'AWS::IAM::Role') {
      for (const pol of (p.Policies as Array<{ PolicyDocument: never }> | undefined) ?? []) docs.push({ where: id, doc: pol.PolicyDocument });
    } else if (r.Type === 'AWS::KMS::Key') {
      docs.push({ where: id, doc: p.KeyPolicy as never });
    } else if (p.PolicyDocument) {
      docs.push({ where: id, doc: p.PolicyDocument as never });
    }
  }
  return docs;
}

/** Parses a JSON string property. */
export function parseJsonProperty(value: unknown): unknown {
  if (typeof value !== 'string') throw new Error(`expected a JSON string, got ${JSON.stringify(value)?.slice(0, 80)}`);
  return JSON.parse(value);
}
