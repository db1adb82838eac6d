/**
 * The network of a `CdcSource` (docs/deploy.md, "Network"): one security group per member in the
 * VPC (the DMS replication instance and each database-facing function), each sending only HTTPS
 * to AWS APIs and the database port to the database (its security group or address range), nothing else.
 */
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { Construct, IDependable } from 'constructs';
import type { AwsApiEgress } from '../aws-api-egress.ts';
import type { SourceDatabase } from '../source-database.ts';
import { allowDatabase, ownSecurityGroup } from './function-network.ts';

export interface SourceNetworkProps {
  readonly sourceId: string;
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly awsApiEgress: AwsApiEgress;
  /** Whether the source has a poll worker (a table captured with `CaptureMode.POLL`). */
  readonly polls: boolean;
}

/** The security groups of a source's members, and the subnets they run in. */
export interface SourceNetwork {
  readonly vpc: ec2.IVpc;
  /** The subnet selection of the replication instance and the functions. */
  readonly subnetSelection: ec2.SubnetSelection;
  readonly subnets: ec2.SelectedSubnets;
  /** The DMS replication instance's group (`SecurityGroup`). */
  readonly replication: ec2.SecurityGroup;
  readonly lifecycle: ec2.SecurityGroup;
  readonly heartbeat: ec2.SecurityGroup;
  readonly slotMonitor: ec2.SecurityGroup;
  readonly snapshot: ec2.SecurityGroup;
  readonly poll?: ec2.SecurityGroup;
  /** Every group above (`CdcSource.connections`). */
  readonly all: ec2.SecurityGroup[];
}

/** Creates the members' security groups (`SecurityGroup`, `<Member>SecurityGroup`). */
export function sourceNetwork(scope: Construct, props: SourceNetworkProps): SourceNetwork {
  const subnetSelection = props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
  const subnets = props.vpc.selectSubnets(subnetSelection);
  const replication = ownSecurityGroup(
    scope,
    'SecurityGroup',
    props.vpc,
    props.awsApiEgress,
    `CDC source ${props.sourceId}: DMS replication instance (${scope.node.path})`,
  );
  const groupOf = (member: string, what: string): ec2.SecurityGroup =>
    ownSecurityGroup(scope, `${member}SecurityGroup`, props.vpc, props.awsApiEgress, `CDC source ${props.sourceId}: ${what} (${scope.node.path})`);
  const lifecycle = groupOf('TaskLifecycle', 'slot preparation and task lifecycle');
  const heartbeat = groupOf('HeartbeatWriter', 'heartbeat writer');
  const slotMonitor = groupOf('SlotMonitor', 'slot monitor');
  const snapshot = groupOf('SnapshotWorker', 'snapshot worker');
  const poll = props.polls ? groupOf('PollWorker', 'poll worker') : undefined;
  const all = [replication, lifecycle, heartbeat, slotMonitor, snapshot, ...(poll ? [poll] : [])];
  return { vpc: props.vpc, subnetSelection, subnets, replication, lifecycle, heartbeat, slotMonitor, snapshot, ...(poll ? { poll } : {}), all };
}

/**
 * The database port, to the database only, for each member that talks to it. Returns the rules
 * the slot step needs first (the replication instance's and the slot preparation's).
 */
export function allowSourceDatabase(scope: Construct, network: SourceNetwork, database: SourceDatabase, sourceId: string): IDependable[] {
  const to = (member: string, group: ec2.ISecurityGroup, what: string): IDependable[] =>
    allowDatabase(scope, member, group, database, `CDC source ${sourceId}: ${what}`, 'the database');
  const slotRules = [...to('Database', network.replication, 'DMS replication instance'), ...to('TaskLifecycleDatabase', network.lifecycle, 'slot preparation')];
  to('HeartbeatWriterDatabase', network.heartbeat, 'heartbeat writer');
  to('SlotMonitorDatabase', network.slotMonitor, 'slot monitor');
  to('SnapshotWorkerDatabase', network.snapshot, 'snapshot worker');
  if (network.poll) to('PollWorkerDatabase', network.poll, 'poll worker');
  return slotRules;
}
